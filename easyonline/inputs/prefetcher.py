"""Reads and parses the next batches on a background thread while the current one trains.

On two cores this overlap is what keeps the trainer's samples/s close to
training from memory: Kafka polling and CSV decoding run while TensorFlow
runs the step.
"""
import logging
import queue
import sys
import threading
import time
from typing import Callable, Optional, Tuple

from easyonline.core.errors import EasyOnlineError
from easyonline.inputs.raw_batch import BatchSource, RawBatch

log = logging.getLogger(__name__)
_END = object()


class Prefetcher:
    """``get(timeout)`` returns (RawBatch, parsed) or None; ``done`` once a finite source ended."""

    def __init__(self, source: BatchSource, parse: Callable[[RawBatch], object], depth: int = 3,
                 poll_timeout: float = 0.5):
        self.source = source
        self._parse = parse
        self._queue: "queue.Queue" = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._poll_timeout = poll_timeout
        self.error: Optional[BaseException] = None
        self.done = False
        self.idle_lag: Optional[int] = None  # the source's lag when it last had nothing to give
        # The reading thread runs pure-Python Kafka decoding; with the default 5 ms GIL switch
        # interval the training thread would wait that long to launch each step.
        if sys.getswitchinterval() > 0.001:
            sys.setswitchinterval(0.001)
        self._thread = threading.Thread(target=self._run, name="easyonline-prefetch", daemon=True)
        self._thread.start()

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                raw = self.source.next_batch(self._poll_timeout)
                if raw is None:
                    self.idle_lag = self.source.idle_lag
                    if self.source.exhausted:
                        break
                    continue
                self.idle_lag = None  # before the batch is queued: caught_up() must not see a stale 0
                if not self._put((raw, self._parse(raw))):
                    return
        except BaseException as e:  # pylint: disable=broad-except
            log.exception("reading the input failed")
            self.error = e
        self._put(_END)

    def get(self, timeout: float) -> Optional[Tuple[RawBatch, object]]:
        if self.done:
            return None
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is _END:
            self.done = True
            if isinstance(self.error, EasyOnlineError):  # e.g. a ConfigError of a policy while reading: its
                raise self.error                          # own exit code (BAD_CONFIG), not a crash's
            if self.error is not None:
                raise RuntimeError(f"input failed: {self.error}") from self.error
            return None
        return item

    def caught_up(self) -> bool:
        """True when the source had nothing more to read and every batch it gave was taken."""
        return self.idle_lag == 0 and self._queue.empty()

    def close(self, close_source: bool = True) -> None:
        """Stops the thread (prefetched batches are dropped: they were not trained)."""
        self._stop.set()
        deadline = time.time() + 10
        while self._thread.is_alive() and time.time() < deadline:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                pass
            self._thread.join(timeout=0.1)
        if close_source:
            self.source.close()
