"""Clean stops: the OSS_STOP_SIGNAL file in model_dir, SIGTERM and SIGINT.

Each only sets a flag; the trainer finishes its batch, checkpoints and exits 0.
"""
import logging
import signal
import threading
import time

from easyonline.utils import fileio

log = logging.getLogger(__name__)
STOP_SIGNAL_FILE = "OSS_STOP_SIGNAL"


class StopSignal:
    """``should_stop()`` is cheap to call every batch; the file is polled every ``poll_secs``."""

    def __init__(self, model_dir: str, use_file: bool = True, poll_secs: float = 2.0):
        self.path = fileio.join(model_dir, STOP_SIGNAL_FILE)
        self._use_file = use_file
        self._poll_secs = poll_secs
        self._next_poll = 0.0
        self._event = threading.Event()
        self.reason = ""

    def install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum, _frame) -> None:
        self.request(f"received {signal.Signals(signum).name}")

    def request(self, reason: str) -> None:
        if not self._event.is_set():
            log.info("stopping: %s", reason)
            self.reason = reason
            self._event.set()

    def should_stop(self) -> bool:
        if self._event.is_set():
            return True
        now = time.time()
        if self._use_file and now >= self._next_poll:
            self._next_poll = now + self._poll_secs
            try:
                if fileio.exists(self.path):
                    self.request(f"found stop signal {self.path}")
            except OSError as e:
                log.warning("cannot check stop signal %s: %s", self.path, e)
        return self._event.is_set()
