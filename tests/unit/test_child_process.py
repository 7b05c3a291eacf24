"""utils/child_process.py: a process tree found from /proc and put on given CPUs, thread by thread (the benchmarks
that stand in for a serving host beside a training one)."""
import os
import signal
import subprocess
import sys

from easyonline.utils.child_process import descendants, pin_to_cpus

_TREE = ("import subprocess, sys, time; "
         "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
         "print(child.pid, flush=True); time.sleep(60)")


def test_a_process_tree_is_found_and_pinned_but_not_the_part_skipped():
    everything = os.sched_getaffinity(0)
    parent = subprocess.Popen([sys.executable, "-c", _TREE], stdout=subprocess.PIPE, text=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    grandchild = int(parent.stdout.readline())
    try:
        assert grandchild in descendants(parent.pid)
        assert {parent.pid, other.pid} <= set(descendants(os.getpid()))
        one = {min(everything)}
        pin_to_cpus(os.getpid(), one, skip={other.pid})
        for pid in (parent.pid, grandchild):
            assert os.sched_getaffinity(pid) == one
        assert os.sched_getaffinity(other.pid) == everything  # skipped, with what it started
        assert os.sched_getaffinity(0) == one
    finally:
        os.sched_setaffinity(0, everything)  # (pytest's own threads: pin_to_cpus moved each of this process's)
        for task in os.listdir("/proc/self/task"):
            os.sched_setaffinity(int(task), everything)
        os.kill(grandchild, signal.SIGKILL)
        for process in (parent, other):
            process.kill()
            process.wait()
