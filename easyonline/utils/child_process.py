"""Child processes that never outlive the tool that started them (a broker, a cluster's tasks)."""
import ctypes
import signal


def die_with_parent() -> None:
    """Linux, as a Popen preexec_fn or first thing in a child: SIGTERM when the process that started it dies."""
    try:
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass
