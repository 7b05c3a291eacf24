"""Ends a command's process without Python's module teardown, which costs 1.4 s of CPU once TensorFlow is loaded.

After ``main`` returns, a normal exit tears down every module and the
objects they hold: with TensorFlow and TFRA imported that is ~1.4 s of CPU
on our 2-core machines (``python -c "import easyonline.jobs.online_train"``
takes 6.4 s user at a normal exit, 4.8 s when ending with ``os._exit``), paid
by every command: each ``export``, ``predict`` or ``eval``, and every
process of the test suite. What an exit must still do is done first and in
Python's own order: non-daemon threads are joined, ``atexit`` functions run
(logging's flush, a Kafka producer's close, ``weakref.finalize`` and
temporary folders, multiprocessing's children), and stdout/stderr are
flushed; then the process ends with its exit code. Nothing we write depends
on a destructor run at teardown (files are written in ``with`` blocks).
"""
import atexit
import os
import sys
import threading
from typing import Any, NoReturn


def exit_code_of(code: Any) -> int:
    """``sys.exit``'s rules: None is 0, an int is itself, anything else is printed to stderr and is 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def exit_process(code: Any) -> NoReturn:
    """Joins non-daemon threads, runs ``atexit`` functions, flushes stdio, and ends the process with ``code``."""
    status = exit_code_of(code)
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon and thread.is_alive():
            thread.join()
    atexit._run_exitfuncs()  # pylint: disable=protected-access  (no public API runs them)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be written to it
            pass
    os._exit(status)  # pylint: disable=protected-access
