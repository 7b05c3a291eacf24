"""A command ends without Python's teardown but still does everything an exit owes (core/process_exit.py).

Each case runs a real command process through ``utils/cli.run_command``: a
non-daemon thread that is still writing, an ``atexit`` function, a log
record, a temporary folder and unflushed stdout must all be finished when
the process has ended, and the exit code must follow ``sys.exit``'s rules; a module global's
destructor must not have run (the teardown that costs 1.4 s of CPU once TensorFlow is loaded was skipped).
"""
import os
import subprocess
import sys
import textwrap

import pytest

COMMAND = textwrap.dedent("""
    import atexit, logging, sys, tempfile, threading, time
    from easyonline.utils.cli import run_command

    out = sys.argv.pop(1)
    result = sys.argv.pop(1)

    class Teardown:
        def __init__(self, path):
            self.path, self.open = path, open  # held: module globals are gone when teardown destroys this

        def __del__(self):
            with self.open(self.path, "w") as f:
                f.write("torn down")

    TEARDOWN = Teardown(out + ".teardown")  # a module global: only Python's teardown at exit destroys it

    def define_flags():
        pass

    def late_writer():
        time.sleep(0.5)
        with open(out + ".thread", "w") as f:
            f.write("joined")

    def main(argv):
        atexit.register(lambda: open(out + ".atexit", "w").write("ran"))
        folder = tempfile.TemporaryDirectory()
        globals()["folder"] = folder  # kept alive until the exit: its finalizer must remove it
        with open(out + ".tmpdir", "w") as f:
            f.write(folder.name)
        threading.Thread(target=late_writer).start()
        logging.getLogger("easyonline.test").warning("a last log line")
        sys.stdout.write("no newline, still buffered")
        if result == "systemexit-text":
            sys.exit("stopped: the reason")
        return {"three": 3, "none": None}[result]

    run_command(define_flags, main)
""")


@pytest.mark.parametrize("result,code", [("three", 3), ("none", 0), ("systemexit-text", 1)])
def test_a_command_exits_with_its_code_after_threads_atexit_and_flushes(tmp_path, result, code):
    script = tmp_path / "command.py"
    script.write_text(COMMAND)
    out = str(tmp_path / "out")
    proc = subprocess.run([sys.executable, str(script), out, result], capture_output=True, text=True, timeout=120)
    assert proc.returncode == code, proc.stderr
    assert proc.stdout.endswith("no newline, still buffered")
    assert "a last log line" in proc.stderr
    assert open(out + ".thread").read() == "joined"
    assert open(out + ".atexit").read() == "ran"
    assert not os.path.exists(open(out + ".tmpdir").read()), "the temporary folder's finalizer did not run"
    assert not os.path.exists(out + ".teardown"), "the process went through Python's teardown (1.4 s with TF)"
    if result == "systemexit-text":
        assert "stopped: the reason" in proc.stderr
