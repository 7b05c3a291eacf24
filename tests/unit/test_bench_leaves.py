"""tools/bench/ holds leaf scripts (issue 52): none imports another, and no test imports them as a package.

What scripts and tests share lives in the installed package (a user of samples/movielens_din.config needs its
sequence builder, for one) or, shared by tests only, in tests/helpers/. A test runs a bench as a script, or
loads its file to check the script's own arithmetic (tests/helpers/bench_scripts.py).
"""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# an import of the scripts as a package, also in a child's ``-c`` code: ``from tools.bench...``, ``import tools.bench``
PACKAGE_IMPORT = re.compile(r"\b(from|import)\s+tools\.bench\b|\bfrom\s+tools\s+import\s+bench\b")


def _python_files(folder: str):
    for directory, _, files in os.walk(os.path.join(ROOT, folder)):
        for name in files:
            if name.endswith(".py"):
                yield os.path.join(directory, name)


def test_no_bench_script_imports_another_and_no_test_or_module_imports_them():
    found = []
    for folder in ("tools", "tests", "easyonline"):
        for path in _python_files(folder):
            with open(path, encoding="utf-8") as f:
                found += [f"{os.path.relpath(path, ROOT)}:{n}" for n, line in enumerate(f, 1)
                          if PACKAGE_IMPORT.search(line) and path != os.path.abspath(__file__)]
    assert not found, found


def test_the_bench_folder_is_no_package():
    assert not os.path.exists(os.path.join(ROOT, "tools", "bench", "__init__.py"))
