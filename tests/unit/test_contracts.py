"""The trainer's two contracts declare what their users read, read from the source's AST.

- every ``trainer.<name>`` a callback of the package uses (publish, train, tools) is declared on
  ``core.callbacks.TrainerView``, so mypy checks it (tools/lint.sh);
- every ``source.<name>`` the training loop and the cluster trainer use is declared on
  ``inputs.raw_batch.BatchSource``;
- neither is read with ``getattr`` (a member left off the contract would hide behind a default).
"""
import ast
import os
from typing import Iterator, Set, Tuple

from easyonline.core.callbacks import Callback, TrainerView
from easyonline.inputs.raw_batch import BatchSource

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CALLBACK_FILES = ["easyonline/publish/publish_callback.py", "easyonline/publish/base_delta.py",
                  "easyonline/train/schedule_callbacks.py", "easyonline/train/prometheus_metrics.py",
                  "easyonline/tools/demo.py"]
LOOP_FILES = ["easyonline/train/training_loop.py", "easyonline/train/eager_engine.py", "easyonline/train/trainer.py",
              "easyonline/distributed/session_engine.py", "easyonline/distributed/cluster_trainer.py"]


def _tree(rel: str) -> ast.AST:
    with open(os.path.join(ROOT, rel)) as f:
        return ast.parse(f.read())


def _callback_classes(rel: str) -> ast.AST:
    """The file's classes that subclass a Callback (as a module, to walk)."""
    return ast.Module(body=[node for node in ast.walk(_tree(rel)) if isinstance(node, ast.ClassDef)
                            and any(isinstance(b, ast.Name) and b.id == "Callback" for b in node.bases)],
                      type_ignores=[])


def _uses(rel: str, name: str, tree=None) -> Iterator[Tuple[str, int]]:
    """(member, line) of every ``<name>.member`` in the file (or ``tree``)."""
    for node in ast.walk(tree or _tree(rel)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == name:
            yield node.attr, node.lineno


def _getattr_on(rel: str, name: str) -> Iterator[int]:
    for node in ast.walk(_tree(rel)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
                and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == name:
            yield node.lineno


def _declared(protocol) -> Set[str]:
    names = set(dir(protocol))
    for klass in protocol.__mro__:
        names.update(getattr(klass, "__annotations__", {}))
    return names


def test_trainer_view_declares_what_callbacks_use():
    declared = _declared(TrainerView)
    missing = {f"{rel}:{line} trainer.{attr}" for rel in CALLBACK_FILES
               for attr, line in _uses(rel, "trainer", _callback_classes(rel)) if attr not in declared}
    assert not missing, f"used by callbacks but not declared on TrainerView: {sorted(missing)}"


def test_callbacks_are_typed_against_the_view():
    """The package's callbacks annotate ``trainer`` as TrainerView, so mypy checks what they read."""
    untyped = []
    for rel in CALLBACK_FILES[:4]:
        for node in ast.walk(_tree(rel)):
            if isinstance(node, ast.FunctionDef) and node.name in vars(Callback) and node.args.args[1:2]:
                arg = node.args.args[1]
                if arg.arg == "trainer" and not (isinstance(arg.annotation, ast.Name)
                                                 and arg.annotation.id == "TrainerView"):
                    untyped.append(f"{rel}:{node.lineno} {node.name}")
    assert not untyped, f"callback hooks whose trainer is not a TrainerView: {untyped}"


def test_batch_source_declares_what_the_loop_uses():
    declared = _declared(BatchSource)
    missing = {f"{rel}:{line} source.{attr}" for rel in LOOP_FILES for attr, line in _uses(rel, "source")
               if attr not in declared}
    assert not missing, f"used by the training loop but not declared on BatchSource: {sorted(missing)}"


def test_no_getattr_on_sources_or_trainer_views():
    found = [f"{rel}:{line}" for rel in LOOP_FILES + CALLBACK_FILES for name in ("source", "trainer")
             for line in _getattr_on(rel, name)]
    assert not found, f"getattr on a source or trainer (declare the member instead): {found}"


def test_batch_source_defaults():
    """A source without positions starts from none, and its partitions are those it starts from."""

    class Empty(BatchSource):
        def next_batch(self, timeout):
            return None

    source = Empty()
    assert dict(source.start_offsets) == {} and source.start_mode == "" and source.partition_numbers() == []
    source.start_offsets = {3: 10, 1: 0}
    assert source.partition_numbers() == [1, 3]


def _class(rel: str, cls: str) -> ast.ClassDef:
    for node in ast.walk(_tree(rel)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return node
    raise AssertionError(f"{cls} not found in {rel}")


def _assigned_self_attributes(node: ast.AST) -> Set[str]:
    """Every ``self.<name>`` the code under ``node`` assigns."""
    return {t.attr for n in ast.walk(node) for t in
            (n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, (ast.AnnAssign, ast.AugAssign))
             else [])
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}


def _methods(node: ast.ClassDef) -> Set[str]:
    return {item.name for item in node.body if isinstance(item, ast.FunctionDef)}


def test_one_loop_whose_trainers_only_choose_their_engine():
    """OnlineTrainer and ClusterTrainer are the one TrainingLoop on an engine: each subclasses the loop (not the
    other), calls its ``__init__``, overrides none of its methods and sets none of its state."""
    loop = _class("easyonline/train/training_loop.py", "TrainingLoop")
    init = next(item for item in loop.body if isinstance(item, ast.FunctionDef) and item.name == "__init__")
    state = _assigned_self_attributes(init)
    assert {"config", "callbacks", "positions", "bad_input", "stop_signal", "source", "engine"} <= state
    for rel, cls in [("easyonline/train/trainer.py", "OnlineTrainer"),
                     ("easyonline/distributed/cluster_trainer.py", "ClusterTrainer")]:
        trainer = _class(rel, cls)
        assert [b.id for b in trainer.bases if isinstance(b, ast.Name)] == ["TrainingLoop"], cls
        overridden = (_methods(trainer) & _methods(loop)) - {"__init__"}
        assert not overridden, f"{cls} overrides the loop's {sorted(overridden)}"
        again = _assigned_self_attributes(trainer) & state
        assert not again, f"{cls} sets the loop's attributes: {sorted(again)}"
        calls_init = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "__init__"
                         and isinstance(n.func.value, ast.Call) and getattr(n.func.value.func, "id", "") == "super"
                         for n in ast.walk(trainer))
        assert calls_init, f"{cls} does not call TrainingLoop.__init__"
