"""``python -m easyonline.tools.local_cluster --ps N --workers M -- <train args>``: a whole cluster on loopback.

Starts N ps and M trainers (the chief and M - 1 workers; each trains its
share of the partitions), each ``python -m easyonline.train <train args>``
with its own TF_CONFIG on 127.0.0.1 and free ports, streams their output
with a role prefix (``[ps0]``, ``[worker0]``, ``[chief]``), and exits with
the chief's exit code once it ends, stopping the rest. An offline run ends
when every trainer has caught up; the chief's summary gives the cluster's
samples/s. Ctrl-C or SIGTERM asks the trainers to stop cleanly (the chief
checkpoints), then stops the ps. The tasks run in their own sessions, so a
Ctrl-C reaches only the launcher, never a ps before the chief's final
checkpoint.
"""
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Deque, Dict, List, Optional, TextIO

from absl import flags

from easyonline.utils import preloaded_python
from easyonline.utils.child_process import die_with_parent
from easyonline.utils.cli import run_command
from easyonline.utils.net import free_port

# Runs "$@" with an empty, read-only tmpfs over "$1", in a mount namespace of its own (checked empty first)
_HIDE_DIR = 'mount -t tmpfs -o ro tmpfs "$1" && [ -z "$(ls -A "$1")" ] && shift && exec "$@"'


def hidden_dir_command(directory: str, command: List[str]) -> List[str]:
    """``command`` run where ``directory`` is an empty read-only directory: a host without that disk."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", _HIDE_DIR, "sh", directory, *command]


def can_hide_dirs(directory: str) -> bool:
    """Whether this machine lets a process hide ``directory`` from itself (``unshare --mount`` needs root
    or CAP_SYS_ADMIN)."""
    if shutil.which("unshare") is None:
        return False
    try:
        probe = subprocess.run(hidden_dir_command(directory, ["true"]), capture_output=True, timeout=30,
                               check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


class LocalCluster:
    """Processes by name ("chief", "ps0", "worker0", ...); use as a context manager.

    ``num_trainers``: the chief and ``num_trainers - 1`` workers. ``ps_hidden_dir``: a directory the ps must
    not see (model_dir's parent): each ps runs in a mount namespace of its own with an empty read-only
    tmpfs over it, as a Kubernetes ps pod without a volume (see ``can_hide_dirs``).
    """

    def __init__(self, num_ps: int, num_trainers: int, train_args: List[str], env: Optional[Dict[str, str]] = None,
                 output: Optional[TextIO] = None, host: str = "127.0.0.1", ps_hidden_dir: Optional[str] = None):
        self.cluster = {"chief": [f"{host}:{free_port(host)}"],
                        "ps": [f"{host}:{free_port(host)}" for _ in range(num_ps)],
                        "worker": [f"{host}:{free_port(host)}" for _ in range(num_trainers - 1)]}
        self.train_args = list(train_args)
        self.ps_hidden_dir = ps_hidden_dir
        self.env = dict(env if env is not None else os.environ)
        self.output = output
        self.lines: Deque[str] = collections.deque(maxlen=50000)  # every prefixed line, for tests and tools
        self.processes: Dict[str, subprocess.Popen] = {}
        self._threads: List[threading.Thread] = []
        self._lock = threading.Lock()

    def task_env(self, role: str, index: int) -> Dict[str, str]:
        env = dict(self.env)
        env["TF_CONFIG"] = json.dumps({"cluster": self.cluster, "task": {"type": role, "index": index}})
        return env

    def task_command(self, role: str, index: int) -> List[str]:
        """The command line of one task (TF_CONFIG tells it its role)."""
        del index
        command = [sys.executable, "-m", "easyonline.train", *self.train_args]
        if role == "ps" and self.ps_hidden_dir:
            return hidden_dir_command(self.ps_hidden_dir, command)
        return command

    def start_task(self, role: str, index: int) -> subprocess.Popen:
        """Starts (or restarts) one task."""
        name = "chief" if role == "chief" else f"{role}{index}"
        proc = preloaded_python.Popen(self.task_command(role, index), env=self.task_env(role, index),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True, preexec_fn=die_with_parent)
        self.processes[name] = proc
        thread = threading.Thread(target=self._pump, args=(name, proc), daemon=True)
        thread.start()
        self._threads.append(thread)
        return proc

    def start(self) -> "LocalCluster":
        for role in ("ps", "worker"):
            for index in range(len(self.cluster[role])):
                self.start_task(role, index)
        self.start_task("chief", 0)
        return self

    def _pump(self, name: str, proc: subprocess.Popen) -> None:
        for raw in proc.stdout:
            line = f"[{name}] {raw.decode('utf-8', 'replace').rstrip()}"
            with self._lock:
                self.lines.append(line)
                if self.output is not None:
                    self.output.write(line + "\n")
                    self.output.flush()

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        self.processes[name].send_signal(sig)
        self.processes[name].wait(30)

    def wait(self, timeout: Optional[float] = None) -> int:
        """Waits for the chief; returns its exit code (raises subprocess.TimeoutExpired)."""
        code = self.processes["chief"].wait(timeout)
        self._threads[-1].join(5)
        return code

    def chief_output(self) -> str:
        return self.output_of("chief")

    def output_of(self, name: str) -> str:
        prefix = f"[{name}] "
        with self._lock:
            return "\n".join(l[len(prefix):] for l in self.lines if l.startswith(prefix))

    def trainers(self) -> List[str]:
        return ["chief"] + [f"worker{i}" for i in range(len(self.cluster["worker"]))]

    def stop(self, chief_timeout: float = 120.0) -> None:
        """Stops the trainers cleanly (SIGTERM: the chief checkpoints), then the ps."""
        trainers = [self.processes[n] for n in self.trainers() if n in self.processes]
        for proc in trainers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.time() + chief_timeout
        for proc in trainers:
            try:
                proc.wait(max(deadline - time.time(), 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
        for name, proc in self.processes.items():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.time() + 15
        for proc in self.processes.values():
            try:
                proc.wait(max(deadline - time.time(), 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def define_flags() -> None:
    flags.DEFINE_integer("ps", 2, "Number of parameter server tasks.")
    flags.DEFINE_integer("workers", 2, "Number of trainers: the chief and workers - 1 worker tasks. Trainer i of "
                         "n reads the Kafka partitions p with p % n == i.")


def main(argv) -> int:
    train_args = argv[1:]
    if not train_args:
        print("error: give the trainer's arguments after --, e.g. -- --config online.config --online",
              file=sys.stderr)
        return 2
    if flags.FLAGS.ps < 1 or flags.FLAGS.workers < 1:
        print("error: --ps and --workers must be at least 1", file=sys.stderr)
        return 2
    cluster = LocalCluster(flags.FLAGS.ps, flags.FLAGS.workers, train_args, output=sys.stdout)
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    cluster.start()
    print(f"[local_cluster] started: {json.dumps(cluster.cluster)}", flush=True)
    code = None
    while code is None:
        if stopping.is_set():
            break
        code = cluster.processes["chief"].poll()
        time.sleep(0.2)
    cluster.stop()
    code = cluster.processes["chief"].returncode
    print(f"[local_cluster] chief exited with {code}; cluster stopped", flush=True)
    return code


def run() -> None:
    run_command(define_flags, main)


if __name__ == "__main__":
    run()
