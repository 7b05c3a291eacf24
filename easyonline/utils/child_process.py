"""Child processes that never outlive the tool that started them (a broker, a cluster's tasks), and what one spent.
"""
import ctypes
import os
import signal
from typing import Dict, List, Optional, Set


def _stat_fields(pid: int) -> List[str]:
    """The fields of /proc/<pid>/stat after the command name (which may hold spaces and parentheses)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process (Linux /proc): what a broker or a reader process cost a
    run (the throughput benches count them)."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_state(pid: int) -> Optional[str]:
    """A process's state letter (R, S, Z for a zombie its parent has not waited for, ...); None once it is gone."""
    try:
        return _stat_fields(pid)[0]
    except (OSError, IndexError):
        return None


def _children() -> Dict[int, List[int]]:
    """{pid: its children's pids} of every living process, from /proc."""
    children: Dict[int, List[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                children.setdefault(int(_stat_fields(int(name))[1]), []).append(int(name))
            except (OSError, IndexError, ValueError):
                continue  # (gone meanwhile)
    return children


def descendants(pid: int, children: Optional[Dict[int, List[int]]] = None) -> List[int]:
    """Every living process below ``pid`` (children, their children, ...), from /proc (or ``children``, a
    ``_children()`` already read)."""
    children = _children() if children is None else children
    out, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        out.append(child)
        todo.extend(children.get(child, []))
    return out


def pin_to_cpus(pid: int, cpus: Set[int], skip: Set[int] = frozenset()) -> None:
    """Puts every thread of ``pid`` and of its descendants (but not those of a pid in ``skip``, nor what they
    started) on ``cpus``: benchmarks that stand in for hosts of their own on one machine (a serving host beside
    a training one). Threads made later inherit their maker's CPUs."""
    children = _children()
    skipped = set(skip) | {d for s in skip for d in descendants(s, children)}
    for one in [pid] + descendants(pid, children):
        if one in skipped:
            continue
        try:
            for task in os.listdir(f"/proc/{one}/task"):
                os.sched_setaffinity(int(task), cpus)
        except (OSError, ValueError):
            continue  # (gone meanwhile)


def die_with_parent(signum: int = signal.SIGTERM) -> None:
    """Linux, as a Popen preexec_fn or first thing in a child: ``signum`` when the process that started it dies.

    A child that ignores SIGTERM (``ignore_stop_signals``) must ask for SIGKILL.
    """
    try:
        ctypes.CDLL("libc.so.6").prctl(1, signum)  # PR_SET_PDEATHSIG
    except OSError:
        pass


#: The signals a terminal (Ctrl-C), ``kill -- -PGID`` or systemd (KillMode=control-group) send to every process
#: of the group; a helper child must leave them to the parent, which stops it when it is done with it.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def ignore_stop_signals() -> None:
    """First thing in a helper child: ignore SIGINT/SIGTERM (also any already pending), then unblock them.

    Its parent starts it with them blocked (``stop_signals_blocked``), so that one arriving while the child's
    interpreter starts is neither lost by the parent nor a KeyboardInterrupt in the child. Ignored, not in a
    process group of its own: systemd signals the whole cgroup whatever the group. Pair with
    ``die_with_parent(signal.SIGKILL)``.
    """
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


class stop_signals_blocked:  # pylint: disable=invalid-name  (used as a context manager, like a function)
    """Around starting a helper child: SIGINT/SIGTERM blocked in this thread, which the child inherits.

    One that arrives meanwhile waits, and is handled here (the trainer's clean stop) once unblocked.
    """

    def __enter__(self):
        self._before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        return self

    def __exit__(self, *exc):
        signal.pthread_sigmask(signal.SIG_SETMASK, self._before)
        return False
