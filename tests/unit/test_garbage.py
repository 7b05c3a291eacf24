"""utils/garbage.settle, run in a child interpreter (it freezes the objects of the process that calls it)."""
import subprocess
import sys

from tests.conftest import python_env

CHILD = """
import gc
from easyonline.utils import garbage
class Node:
    pass
before = gc.get_freeze_count()
garbage.settle()
assert gc.get_freeze_count() > before + 1000, gc.get_freeze_count()
assert gc.get_threshold()[0] == garbage.YOUNG_THRESHOLD
a, b = Node(), Node()
a.other, b.other = b, a  # a cycle made after settle is still collected
del a, b
assert gc.collect() >= 2
print("ok")
"""


def test_settle_freezes_start_up_and_still_collects_later_cycles():
    result = subprocess.run([sys.executable, "-c", CHILD], env=python_env(), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]
