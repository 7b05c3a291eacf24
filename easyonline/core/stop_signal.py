"""Clean stops: SIGTERM, SIGINT and ``trainer.stop()`` set a flag that the loop checks after each batch.

The stop file (``model_dir/OSS_STOP_SIGNAL``) is polled by the StopFile callback.
"""
import logging
import signal
import threading

log = logging.getLogger(__name__)
STOP_SIGNAL_FILE = "OSS_STOP_SIGNAL"


class StopSignal:
    """``should_stop()`` is cheap to call every batch; ``reason`` says why."""

    def __init__(self):
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
        return self._event.is_set()
