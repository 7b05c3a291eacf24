"""Commands forked from a preloaded server behave as new processes: output, exit codes, signals, cwd, refusals.

Each check runs the same command both ways (a new process, and forked) and compares what a caller sees.
"""
import os
import signal
import subprocess
import sys
import time

import pytest

from easyonline.utils import preloaded_python
from tests.conftest import SAMPLES, python_env


@pytest.fixture(scope="module")
def servers(request, tmp_path_factory):
    """The session's servers (tests/conftest.py), or this module's own in a session without integration tests."""
    started = request.getfixturevalue("preloaded_commands")
    if started is not None:
        yield started
        return
    with preloaded_python.PreloadedServers(str(tmp_path_factory.mktemp("pp")), env=python_env()) as own:
        yield own


def _both(argv, **kwargs):
    forked = preloaded_python.run(argv, capture_output=True, text=True, timeout=120, **kwargs)
    real = subprocess.run(argv, capture_output=True, text=True, timeout=120, **kwargs)
    return forked, real


def test_a_failing_command_prints_and_exits_as_a_new_process(servers, tmp_path):
    argv = [sys.executable, "-m", "easyonline.train", f"--config={tmp_path}/missing.config", "--online"]
    with preloaded_python.Popen(argv, env=python_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        out, err = proc.communicate(timeout=120)
        assert proc.forked
    real = subprocess.run(argv, env=python_env(), capture_output=True, timeout=120)
    assert (proc.returncode, out, err) == (real.returncode, real.stdout, real.stderr)
    assert proc.returncode == 2 and b"missing.config does not exist" in err


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_the_working_directory_pythonpath_and_stdin_are_the_callers(servers, tmp_path):
    """A relative --config resolves against cwd; a module on the caller's PYTHONPATH is importable (the
    config's ``data_config.parse_fn`` style imports happen in the child); stdin is the caller's."""
    env = python_env()
    argv = [sys.executable, "-m", "easyonline.predict", "--config=online.config", f"--model_dir={tmp_path}/m",
            f"--output_path={tmp_path}/out.jsonl", "--input_path=/dev/stdin"]
    forked, real = _both(argv, cwd=SAMPLES, env=env, input="")
    assert forked.returncode == real.returncode
    assert forked.stderr.splitlines()[-1:] == real.stderr.splitlines()[-1:], (forked.stderr, real.stderr)


def test_a_signal_ends_the_forked_child_and_its_status_is_the_callers(servers, tmp_path):
    config = os.path.join(SAMPLES, "online.config")
    argv = [sys.executable, "-m", "easyonline.eval", f"--config={config}", f"--model_dir={tmp_path}/m",
            "--poll_secs=0.2"]
    proc = preloaded_python.Popen(argv, env=python_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    assert proc.forked and _parent(proc.pid) == servers.processes["trainer"].pid
    assert os.getsid(proc.pid) == proc.pid  # its own session, as asked
    time.sleep(3)
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(0.2)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL
    proc.stdout.close()


def test_what_a_server_cannot_run_exactly_starts_a_new_process(servers, tmp_path):
    """An import-time variable that differs (TensorFlow's log level), a module outside the profiles, a
    preexec_fn: each is an ordinary child of the caller."""
    train_help = [sys.executable, "-m", "easyonline.train", "--help"]  # (--help loads no TensorFlow: quick)
    cases = [(train_help, {"env": {**python_env(), "TF_CPP_MIN_LOG_LEVEL": "0"}}),
             ([sys.executable, "-m", "easyonline.tools.read_updates", "--help"], {"env": python_env()}),
             (train_help, {"env": python_env(), "preexec_fn": os.getpid})]
    for argv, kwargs in cases:
        with preloaded_python.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs) as proc:
            assert not proc.forked and _parent(proc.pid) == os.getpid(), argv
            assert proc.wait(120) == 0
    missing = f"--config={tmp_path}/missing.config"
    with preloaded_python.Popen([sys.executable, "-m", "easyonline.train", missing], env=python_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
        assert proc.forked and proc.wait(120) == 2


CODE = r"""
import os, sys
print(sys.argv, repr(sys.path[0]), __name__, os.getcwd(), os.environ.get("PP_TEST"))
sys.stdout.flush()
if len(sys.argv) > 2:
    raise ValueError("as asked")
"""


def test_c_code_runs_as_python_runs_it_with_the_named_profile(servers, tmp_path):
    """argv, sys.path[0], __name__, cwd and environment as ``python -c``; an exception's traceback and exit 1."""
    env = {**python_env(), "PP_TEST": "yes"}
    for args in (["one"], ["one", "two"]):
        argv = [sys.executable, "-c", CODE, *args]
        with preloaded_python.Popen(argv, preload="serving", cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) as proc:
            out, err = proc.communicate(timeout=120)
            assert proc.forked
        real = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert (proc.returncode, out) == (real.returncode, real.stdout)
        assert err.splitlines()[-1:] == real.stderr.splitlines()[-1:]
    assert proc.returncode == 1 and "ValueError: as asked" in err and str(tmp_path) in out
    with preloaded_python.Popen([sys.executable, "-c", "pass"], env=env) as plain:  # no profile named: new
        assert not plain.forked and plain.wait(120) == 0


def test_a_script_runs_as_python_runs_it(servers, tmp_path):
    """``python path/script.py args``: sys.argv, __file__ and sys.path[0] (the script's folder, whose modules
    it imports) as a new process has them."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "helper_next_to_it.py").write_text("WHERE = 'beside the script'\n")
    script = tmp_path / "lib" / "script.py"
    script.write_text("import os, sys\nimport helper_next_to_it\n"
                      "print(sys.argv[1:], os.path.basename(__file__), sys.path[0] == os.path.dirname(__file__), "
                      "helper_next_to_it.WHERE, __name__)\n")
    argv = [sys.executable, "lib/script.py", "a", "b"]
    with preloaded_python.Popen(argv, preload="serving", cwd=tmp_path, env=python_env(), stdout=subprocess.PIPE,
                                text=True) as proc:
        out, _ = proc.communicate(timeout=120)
        assert proc.forked
    real = subprocess.run(argv, cwd=tmp_path, env=python_env(), capture_output=True, text=True, timeout=120)
    assert (proc.returncode, out) == (0, real.stdout) == (real.returncode, "['a', 'b'] script.py True beside the script __main__\n")


REQUESTER = r"""
import sys, time
from easyonline.utils import preloaded_python
from easyonline.utils.child_process import die_with_parent
proc = preloaded_python.Popen(sys.argv[1:], preexec_fn=die_with_parent)
print(proc.pid, proc.forked, flush=True)
time.sleep(600)
"""


def test_a_child_that_dies_with_its_parent_dies_with_the_process_that_asked_for_it(servers, tmp_path):
    """``preexec_fn=die_with_parent`` (LocalCluster's tasks): the forked child's parent is the server, so the child
    watches the process that asked for it; that one SIGKILLed, the child gets SIGTERM and ends."""
    eval_argv = [sys.executable, "-m", "easyonline.eval", f"--config={os.path.join(SAMPLES, 'online.config')}",
                 f"--model_dir={tmp_path}/m", "--poll_secs=0.2"]
    requester = subprocess.Popen([sys.executable, "-c", REQUESTER, *eval_argv], env=python_env(),
                                 stdout=subprocess.PIPE, text=True)
    pid, forked = requester.stdout.readline().split()
    child = int(pid)
    assert forked == "True" and _parent(child) == servers.processes["trainer"].pid
    time.sleep(2)
    assert _parent(child) == servers.processes["trainer"].pid  # still running
    requester.kill()
    requester.wait(30)
    deadline = time.time() + 60
    while time.time() < deadline and os.path.exists(f"/proc/{child}"):
        time.sleep(0.2)
    assert not os.path.exists(f"/proc/{child}")  # ended, and reaped by the server
    requester.stdout.close()
