"""Every ```python example in docs/python_api.md runs as written (from the repository root) and passes its asserts."""
import os
import re
import subprocess

import pytest

from tests.conftest import PYTHON, ROOT, python_env

DOC = os.path.join(ROOT, "docs", "python_api.md")


def _examples():
    with open(DOC) as f:
        return re.findall(r"```python\n(.*?)```", f.read(), re.S)


def test_the_api_page_has_examples():
    assert len(_examples()) >= 3


@pytest.mark.parametrize("index", range(len(_examples())))
def test_example_runs(index, tmp_path):
    code = _examples()[index]
    path = tmp_path / f"example_{index}.py"
    path.write_text(code)
    env = python_env()
    env["TMPDIR"] = str(tmp_path)  # the examples' tempfile.mkdtemp() lands in the test's directory
    proc = subprocess.run([PYTHON, str(path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=360)
    assert proc.returncode == 0, f"example {index}:\n{code}\n--- output ---\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}"
