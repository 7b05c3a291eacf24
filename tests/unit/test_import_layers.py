"""The package's imports point one way (docs/architecture.md), read from the source's AST.

- the ground floor (core, utils, protos) imports nothing above it, and core imports no other package;
- no part imports the top floor (jobs, tools), except ``python -m`` entry shims (``__main__.py``);
- no two subpackages import each other, directly or through others (no cycles);
- fewer than 15 imports of easyonline modules sit inside functions, each with a ``why:`` comment;
- serving loads none of models, embedding, train, checkpoint or publish;
- the Kafka reader's child process (inputs/reader_process.py) starts without TensorFlow.
"""
import ast
import os
import subprocess
import sys
from typing import Dict, List, Set, Tuple

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "easyonline")
GROUND = {"core", "utils", "protos"}
TOP = {"jobs", "tools"}


def _modules():
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, os.path.dirname(PACKAGE))[:-3].replace(os.sep, ".")
                yield path, rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def _subpackage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "<root>"


def _imports(path: str, module: str) -> List[Tuple[str, ast.AST, bool]]:
    """(imported easyonline module, node, inside a function) for every import in the file."""
    tree = ast.parse(open(path).read())
    inner = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner.update(id(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom)))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = module.split(".")[: len(module.split(".")) - node.level + (1 if path.endswith("__init__.py") else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            targets = [f"{target}.{a.name}" for a in node.names] if target == "easyonline" else [target]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        found.extend((t, node, id(node) in inner) for t in targets if t.startswith("easyonline"))
    return found


def _graph() -> Dict[str, Set[str]]:
    edges: Dict[str, Set[str]] = {}
    for path, module in _modules():
        if module.endswith("__main__"):
            continue  # `python -m easyonline.<verb>` shims: entry points of the top floor
        source = _subpackage(module)
        for target, _, _ in _imports(path, module):
            if _subpackage(target) != source:
                edges.setdefault(source, set()).add(_subpackage(target))
    return edges


def test_ground_floor_imports_nothing_above_it():
    edges = _graph()
    assert not edges.get("core"), edges.get("core")
    for floor in GROUND:
        assert edges.get(floor, set()) <= GROUND, (floor, edges.get(floor))


def test_no_part_imports_the_top_floor():
    for source, targets in _graph().items():
        if source not in TOP:
            assert not targets & TOP, (source, targets & TOP)


def test_no_import_cycles_between_subpackages():
    edges = _graph()

    def reachable(start: str) -> Set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    cycles = sorted(p for p in edges if p != "<root>" and p in reachable(p))
    assert not cycles, {p: sorted(edges[p]) for p in cycles}


def test_few_function_level_imports_each_saying_why():
    inner = []
    for path, module in _modules():
        lines = open(path).read().split("\n")
        for target, node, is_inner in _imports(path, module):
            if is_inner:
                here = " ".join(lines[max(node.lineno - 2, 0): node.end_lineno])
                inner.append((module, node.lineno, "why:" in here))
    assert len(inner) < 15, inner
    assert all(has_why for _, _, has_why in inner), [i for i in inner if not i[2]]


def _modules_after_importing(module: str) -> List[str]:
    """Every module in sys.modules after a fresh interpreter imports ``module`` alone."""
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(PACKAGE))
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1].split()


def test_serving_loads_no_training_code():
    loaded = {m.split(".")[1] for m in _modules_after_importing("easyonline.jobs.serve_job")
              if m.startswith("easyonline.")}
    assert "serve" in loaded and "updates" in loaded
    assert not loaded & {"models", "embedding", "train", "checkpoint", "publish"}, loaded


def test_the_kafka_reader_child_starts_without_tensorflow():
    """The reader child is spawned at every trainer start and restart; TensorFlow would add seconds of CPU."""
    loaded = _modules_after_importing("easyonline.inputs.reader_process")
    assert not [m for m in loaded if m.split(".")[0] in ("tensorflow", "tf_keras", "keras")]
