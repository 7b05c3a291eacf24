"""Commands forked from a process that has already imported TensorFlow (a fork server), for the test suite.

Each ``python -m easyonline.<verb>`` spends about 4.8 s of CPU importing TensorFlow, TFRA and Kafka's client
before its first line of work, and the test suite starts a few hundred of them on CI's 2 cores. A fork server
imports what a family of commands imports (``PROFILES``: the trainer's jobs; the serving processes, which do not
load TFRA) once, runs no TensorFlow op (so no runtime thread exists yet; numpy's OpenBLAS thread is re-made at
fork by OpenBLAS itself), and forks one child per command. The child then runs the command as
``python -m <module> args...`` would: its argv, environment, working directory, ``sys.path`` (its cwd and
PYTHONPATH first), standard streams (sent over a Unix socket), signal mask, session or process group, and it ends
through ``core/process_exit.py`` as the commands do. ``Popen`` is ``subprocess.Popen`` whose wait and poll get the
exit status from the server, whose child it is (signals go straight to the child's pid).

It is used only where ``EASYONLINE_PRELOADED_PYTHON`` names a folder of running servers (the test suite sets it)
and a request can be served exactly: this interpreter, ``-m`` with a module of a profile (or ``-c`` code or a
script whose caller names the profile it imports anyway: ``preload=``), no ``preexec_fn`` (but
``child_process.die_with_parent``, done by a thread that watches the caller's pid),
``pass_fds`` or user change, the requester in the server's session, and an environment that agrees with the
server's on everything read while importing (``_import_time_env``: ``TF_*``, thread-pool, locale and ``PYTHON*``
variables other than PYTHONPATH and PYTHONUNBUFFERED, which the child applies itself). Anything else, or a server
not running, is an ordinary ``subprocess.Popen``. What differs from a new process: the child's parent is the
server, the modules of its profile are loaded before its first line, and TensorFlow's import-time log lines were
printed (or dropped) by the server. Tests of exactly those (a command's start-up output, its exit, its imports)
start real processes. Production never sets the variable.
"""
import argparse
import builtins
import io
import json
import os
import runpy
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
import types
from typing import Dict, List, Optional, Tuple

from easyonline.core.process_exit import exit_process
from easyonline.utils.child_process import die_with_parent, process_state

ENV_VAR = "EASYONLINE_PRELOADED_PYTHON"
#: profile -> (the modules a server of it imports, the ``-m`` modules it runs). Within a profile the commands
#: import (nearly) the same closure; serving is its own (it loads TFRA only for an export that needs it).
PROFILES: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]] = {
    "trainer": (("easyonline.train", "easyonline.export", "easyonline.eval", "easyonline.predict",
                 "easyonline.jobs.train_cli", "easyonline.jobs.export_cli", "easyonline.jobs.eval_cli",
                 "easyonline.jobs.predict_cli", "easyonline.jobs.train_job", "easyonline.jobs.export_job",
                 "easyonline.jobs.eval_job", "easyonline.jobs.predict_job"),
                ("easyonline.train", "easyonline.export", "easyonline.eval", "easyonline.predict")),
    "serving": (("easyonline.serve", "easyonline.jobs.serve_cli", "easyonline.jobs.serve_job"),
                ("easyonline.serve", "easyonline.tools.tfserving_follower")),
}
_IMPORT_TIME_PREFIXES = ("TF_", "OMP_", "MKL_", "KMP_", "OPENBLAS_", "CUDA_", "LD_", "LC_", "PYTHON",
                         "EASYONLINE_LIBRARY_LOGS")
_APPLIED_BY_CHILD = ("PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", ENV_VAR,
                     "TF_CONFIG")  # (a cluster task's role: read when the job starts, not at import)
_START_WAIT_SECS = 120.0


def _import_time_env(env: Dict[str, str]) -> Dict[str, str]:
    """The variables a process reads while it imports TensorFlow and our modules (a child cannot change them)."""
    return {k: v for k, v in env.items()
            if (k.startswith(_IMPORT_TIME_PREFIXES) or k in ("LANG", "LANGUAGE")) and k not in _APPLIED_BY_CHILD}


def _profile_of(module: str) -> Optional[str]:
    for name, (_, runs) in PROFILES.items():
        if module in runs:
            return name
    return None


def _send_message(sock: socket.socket, payload: bytes, fds: List[int]) -> None:
    header = struct.pack("!I", len(payload))
    socket.send_fds(sock, [header + payload], fds)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        part = sock.recv(size - len(data))
        if not part:
            raise EOFError("the peer closed the connection")
        data += part
    return data


# ---------------------------------------------------------------------------------------------------- the client


class Popen(subprocess.Popen):
    """``subprocess.Popen``, whose eligible ``python -m`` commands are forked by a running preloaded server."""

    _preloaded: Optional[socket.socket] = None
    forked = False  # True: a server forked it (its parent is the server)

    def __init__(self, *args, preload: Optional[str] = None, **kwargs):
        """``preload``: the profile whose modules a ``python -c`` code (or a ``-m`` module outside ``PROFILES``)
        imports anyway."""
        if preload is not None and preload not in PROFILES:
            raise ValueError(f"preload={preload!r}: no such profile (one of {sorted(PROFILES)})")
        self._preload = preload
        super().__init__(*args, **kwargs)

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
                       creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite,
                       restore_signals, gid, gids, uid, umask, start_new_session, process_group):
        conn = None
        die_with_caller = preexec_fn is die_with_parent  # done in the child by watching this process
        other_setup = (preexec_fn and not die_with_caller) or pass_fds or not close_fds or umask >= 0
        if not (other_setup or shell or executable or gid is not None or gids or uid is not None):
            conn = _request(args, self._preload, cwd, env, start_new_session, process_group, die_with_caller,
                            [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1,
                             errwrite if errwrite != -1 else 2])
        if conn is None:
            return super()._execute_child(args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
                                          creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread,
                                          errwrite, restore_signals, gid, gids, uid, umask, start_new_session,
                                          process_group)
        self._preloaded, self.pid = conn
        self.forked = True
        self._child_created = True
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)
        return None

    def _status(self, block: bool, deadstate: Optional[int] = None) -> Optional[int]:
        """The child's wait status from the server, or None if it has not ended yet."""
        conn = self._preloaded
        ready, _, _ = select.select([conn], [], [], None if block else 0)
        if not ready:
            return None
        try:
            return struct.unpack("!i", _recv_exact(conn, 4))[0]
        except (EOFError, OSError):  # the server died (only with the test run)
            if deadstate is not None:  # (from __del__, maybe at interpreter exit)
                return deadstate << 8
            while process_state(self.pid) not in (None, "Z"):
                time.sleep(0.1)
            sys.stderr.write(f"preloaded_python: the server of pid {self.pid} went away; its status is lost\n")
            return 255 << 8

    def _internal_poll(self, _deadstate=None, **unused):  # pylint: disable=arguments-differ
        if self._preloaded is None:
            return super()._internal_poll(_deadstate)
        if self.returncode is None and self._waitpid_lock.acquire(False):
            try:
                if self.returncode is None:
                    status = self._status(block=False, deadstate=255 if _deadstate is not None else None)
                    if status is not None:
                        self._handle_exitstatus(status)
            finally:
                self._waitpid_lock.release()
        return self.returncode

    def _try_wait(self, wait_flags):
        if self._preloaded is None:
            return super()._try_wait(wait_flags)
        status = self._status(block=not wait_flags & os.WNOHANG)
        return (0, 0) if status is None else (self.pid, status)

    def _handle_exitstatus(self, sts, *args, **kwargs):  # pylint: disable=arguments-differ
        super()._handle_exitstatus(sts, *args, **kwargs)
        if self._preloaded is not None:
            self._preloaded.close()


def run(*popenargs, input=None, capture_output=False, timeout=None, check=False,  # pylint: disable=redefined-builtin
        **kwargs) -> subprocess.CompletedProcess:  # (preload= is Popen's)
    """``subprocess.run`` with this module's ``Popen``."""
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    if capture_output:
        kwargs["stdout"] = subprocess.PIPE
        kwargs["stderr"] = subprocess.PIPE
    with Popen(*popenargs, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            process.kill()
            exc.stdout, exc.stderr = process.communicate()
            raise
        except:  # noqa: E722  (subprocess.run's own cleanup: kill the child on any error, then re-raise)
            process.kill()
            raise
        retcode = process.poll()
        if check and retcode:
            raise subprocess.CalledProcessError(retcode, process.args, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(process.args, retcode, stdout, stderr)


def _request(args, preload: Optional[str], cwd, env, start_new_session: bool, process_group: int, die_with_caller: bool,
             fds: List[int]) -> Optional[Tuple[socket.socket, int]]:
    """(the connection, the child's pid) if a server forked the command; None to start it the ordinary way."""
    folder = os.environ.get(ENV_VAR, "")
    if not folder or isinstance(args, (str, bytes, os.PathLike)):
        return None
    argv = [os.fsdecode(a) for a in args]
    if len(argv) < 2 or (argv[1] != "-m" and not preload) or (argv[1] in ("-m", "-c") and len(argv) < 3):
        return None
    work_dir = os.fsdecode(cwd) if cwd is not None else os.getcwd()
    if argv[1] not in ("-m", "-c"):  # a script: run by its absolute path, as its sys.path[0] is its folder
        if argv[1].startswith("-"):
            return None
        argv = [argv[0], os.path.abspath(os.path.join(work_dir, argv[1])), *argv[2:]]
    if os.path.abspath(os.path.join(work_dir, argv[0])) != os.path.abspath(sys.executable):
        return None
    profile = preload or _profile_of(argv[2])
    if argv[1] not in ("-m", "-c") and not os.path.isfile(argv[1]):
        return None
    if profile is None or not os.path.isdir(work_dir):
        return None
    environment = {os.fsdecode(k): os.fsdecode(v) for k, v in (env if env is not None else os.environ).items()}
    sock_path = os.path.join(folder, f"{profile}.sock")
    deadline = time.time() + _START_WAIT_SECS
    while not os.path.exists(sock_path):  # a server still importing: as long as a process would take
        if not os.path.exists(os.path.join(folder, f"{profile}.starting")) or time.time() > deadline:
            return None
        time.sleep(0.1)
    request = {"argv": argv, "cwd": work_dir, "env": environment, "start_new_session": bool(start_new_session),
               "process_group": process_group, "pgid": os.getpgid(0), "sid": os.getsid(0),
               "die_with": os.getpid() if die_with_caller else 0,
               "sigmask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))}
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(sock_path)
        _send_message(conn, json.dumps(request).encode(), fds)
        pid = struct.unpack("!i", _recv_exact(conn, 4))[0]
    except (OSError, EOFError):
        conn.close()
        return None
    if pid <= 0:  # refused: the environment or the session differs
        conn.close()
        return None
    return conn, pid


# ---------------------------------------------------------------------------------------------------- the server


class PreloadedServers:
    """Starts a server per profile in a fresh folder, names it in ``os.environ`` (children inherit it), stops them."""

    def __init__(self, folder: str, env: Optional[Dict[str, str]] = None):
        self.folder = folder
        self.env = dict(env if env is not None else os.environ)
        self.processes: Dict[str, subprocess.Popen] = {}

    def __enter__(self) -> "PreloadedServers":
        os.makedirs(self.folder, exist_ok=True)
        for profile in PROFILES:
            open(os.path.join(self.folder, f"{profile}.starting"), "w").close()
            with open(os.path.join(self.folder, f"{profile}.log"), "ab") as log:
                self.processes[profile] = subprocess.Popen(
                    [sys.executable, "-m", __name__, "--folder", self.folder, "--profile", profile,
                     "--parent", str(os.getpid())], env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT)
        self._before = os.environ.get(ENV_VAR)
        os.environ[ENV_VAR] = self.folder
        return self

    def __exit__(self, *exc) -> None:
        if self._before is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = self._before
        for proc in self.processes.values():
            proc.terminate()
        for proc in self.processes.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _die_with(parent: int) -> None:
    die_with_parent(signal.SIGKILL)  # no server outlives the test run
    if os.getppid() != parent:
        os._exit(0)  # pylint: disable=protected-access


def serve(folder: str, profile: str, parent: int) -> None:
    """Imports the profile's modules, then forks a child per request until the parent ends or SIGTERM."""
    _die_with(parent)
    starting = os.path.join(folder, f"{profile}.starting")
    try:
        before = dict(os.environ)
        for module in PROFILES[profile][0]:
            __import__(module)
        added = {k: v for k, v in os.environ.items() if k not in before}
        _check_no_runtime()
    except BaseException:  # pylint: disable=broad-except  (any failure: clients start real processes)
        traceback.print_exc()
        os.unlink(starting)
        raise
    base_path = [p for p in sys.path[1:] if p not in before.get("PYTHONPATH", "").split(os.pathsep)]
    server = _Server(folder, profile, before, added, base_path)
    os.unlink(starting)
    server.loop()


def _check_no_runtime() -> None:
    """Forking is safe only while TensorFlow's runtime (its thread pools) has not started."""
    from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top  why: a client must not load TensorFlow
    ctx = context.context_safe()
    if ctx is not None and getattr(ctx, "_context_handle", None) is not None:
        raise RuntimeError("TensorFlow's runtime started while importing: forking it is not safe")
    if threading.active_count() != 1:
        raise RuntimeError(f"importing started Python threads: {threading.enumerate()}")


class _Server:
    def __init__(self, folder: str, profile: str, env: Dict[str, str], added: Dict[str, str], base_path: List[str]):
        self.profile = profile
        self.import_env = _import_time_env(env)
        self.added = added
        self.base_path = base_path
        self.children: Dict[int, socket.socket] = {}
        self.stopping = False
        path = os.path.join(folder, f"{profile}.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path + ".new")
        self.listener.listen(64)
        os.rename(path + ".new", path)  # appears only once it accepts
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_write, False)
        signal.set_wakeup_fd(self.wake_write)
        signal.signal(signal.SIGCHLD, lambda *unused: None)
        signal.signal(signal.SIGTERM, self._stop)
        print(f"preloaded_python {profile}: ready", flush=True)

    def _stop(self, *unused) -> None:
        self.stopping = True

    def loop(self) -> None:
        while not self.stopping:
            ready, _, _ = select.select([self.listener, self.wake_read], [], [], 1.0)
            if self.wake_read in ready:
                os.read(self.wake_read, 4096)
            self._reap()
            if self.listener in ready:
                conn, _ = self.listener.accept()
                try:
                    self._fork(conn)
                except Exception:  # pylint: disable=broad-except  (a bad request must not end the server)
                    traceback.print_exc()
                    conn.close()
        for pid in list(self.children):  # stopped: the children are left to run (they are not ours to end)
            self.children.pop(pid).close()

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(struct.pack("!i", status))
                except OSError:
                    pass
                conn.close()

    def _fork(self, conn: socket.socket) -> None:
        header, fds, _, _ = socket.recv_fds(conn, 4, 3)
        try:
            if len(header) < 4:
                header += _recv_exact(conn, 4 - len(header))
            request = json.loads(_recv_exact(conn, struct.unpack("!I", header)[0]))
            if (_import_time_env(request["env"]) != self.import_env or request["sid"] != os.getsid(0)
                    or len(fds) != 3):
                conn.sendall(struct.pack("!i", 0))
                conn.close()
                return
            ready_read, ready_write = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(ready_read)
                self._child(request, fds, conn, ready_write)  # never returns
            os.close(ready_write)
            try:  # as Popen returns once the child exec'd: its session, streams and cwd are set
                select.select([ready_read], [], [], 30)
            finally:
                os.close(ready_read)
            self.children[pid] = conn
            conn.sendall(struct.pack("!i", pid))
            option = request["argv"][1]
            what = request["argv"][2] if option == "-m" else "-c code" if option == "-c" else option
            print(f"forked {pid}: {what} {' '.join(request['argv'][3 if option in ('-m', '-c') else 2:])[:300]}",
                  flush=True)
        finally:
            for fd in fds:
                os.close(fd)

    def _child(self, request: dict, fds: List[int], conn: socket.socket, ready: int) -> None:
        try:
            signal.set_wakeup_fd(-1)
            for signum in (signal.SIGCHLD, signal.SIGTERM):
                signal.signal(signum, signal.SIG_DFL)
            for sock in [self.listener, conn, *self.children.values()]:
                sock.close()
            os.close(self.wake_read)
            os.close(self.wake_write)
            if request["start_new_session"]:
                os.setsid()
            elif request["process_group"] is not None and request["process_group"] >= 0:
                os.setpgid(0, request["process_group"])
            else:
                os.setpgid(0, request["pgid"])
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            for fd in fds:
                if fd > 2:
                    os.close(fd)
            os.chdir(request["cwd"])
            env = request["env"]
            os.environ.clear()
            os.environ.update(env)
            for key, value in self.added.items():  # what importing set (TF_CPP_MIN_LOG_LEVEL, TF_USE_LEGACY_KERAS)
                os.environ.setdefault(key, value)
            extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
            option = request["argv"][1]
            first = request["cwd"] if option == "-m" else "" if option == "-c" else os.path.dirname(option)
            sys.path[:] = [first, *extra, *self.base_path]
            sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
            _new_stdio(unbuffered=bool(env.get("PYTHONUNBUFFERED")))
            _reseed()
            signal.pthread_sigmask(signal.SIG_SETMASK, request["sigmask"])
            if request["die_with"]:
                _die_with_caller(request["die_with"])
            os.close(ready)
        except BaseException:  # pylint: disable=broad-except
            traceback.print_exc()
            os._exit(1)  # pylint: disable=protected-access
        _run(request["argv"][1:])


def _die_with_caller(pid: int) -> None:
    """``die_with_parent`` (SIGTERM when the process that started it dies) where that process is not the parent."""
    try:
        watched: Optional[int] = os.pidfd_open(pid)
    except OSError:  # (a kernel before 5.3: poll the pid instead)
        watched = None

    def watch() -> None:
        if watched is not None:
            select.select([watched], [], [])
        else:
            while process_state(pid) not in (None, "Z"):
                time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="die_with_caller", daemon=True).start()


def _new_stdio(unbuffered: bool) -> None:
    """Standard streams made as Python makes them at start, on the descriptors the request sent."""
    encoding = sys.stdout.encoding
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.open(0, "rb", closefd=False), encoding=encoding)
    for fd, name, errors in ((1, "stdout", "strict"), (2, "stderr", "backslashreplace")):
        raw = io.open(fd, "wb", buffering=0 if unbuffered else -1, closefd=False)
        stream = io.TextIOWrapper(raw, encoding=encoding, errors=errors, write_through=unbuffered,
                                  line_buffering=(name == "stderr" or os.isatty(fd)) and not unbuffered)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _reseed() -> None:
    """``random`` reseeds itself at fork; numpy's global generator does not."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _run(options: List[str]) -> None:
    """``-m module args...``, ``-c code args...`` or ``script args...``, as Python runs them; then the process ends."""
    if options[0] not in ("-m", "-c"):
        options = ["", *options]  # a script: its path is argv[0]
    option, target, args = options[0], options[1], options[2:]
    sys.argv = [option or target, *args]
    try:
        if not option:
            runpy.run_path(target, run_name="__main__")
        elif option == "-m":
            runpy._run_module_as_main(target, alter_argv=True)  # pylint: disable=protected-access  (what -m runs)
        else:
            main = types.ModuleType("__main__")
            main.__dict__["__builtins__"] = builtins
            sys.modules["__main__"] = main
            exec(compile(target, "<string>", "exec"), main.__dict__)  # pylint: disable=exec-used  (what -c runs)
        code = 0
    except SystemExit as stop:
        code = stop.code
    except KeyboardInterrupt:
        traceback.print_exc()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 130
    except BaseException:  # pylint: disable=broad-except  (as Python does: the traceback, then exit 1)
        sys.excepthook(*sys.exc_info())
        code = 1
    exit_process(code)


def main(argv: Optional[List[str]] = None) -> None:
    """``python -m easyonline.utils.preloaded_python --folder F --profile P --parent PID``: one server."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--folder", required=True, help="the folder of the servers' sockets")
    parser.add_argument("--profile", required=True, choices=sorted(PROFILES), help="which commands it runs")
    parser.add_argument("--parent", type=int, required=True, help="the pid it ends with (the test run)")
    options = parser.parse_args(argv)
    serve(options.folder, options.profile, options.parent)


if __name__ == "__main__":
    main()
