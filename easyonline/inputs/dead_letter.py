"""Sends rejected samples to a dead-letter topic, with why, for someone to look at later.

The record value is the rejected line (or the first bytes of a rejected
message); headers carry ``reason``, ``kind`` and ``model``. The training
thread only puts a line in a bounded queue (``MAX_QUEUED``); a thread of
its own sends them, with one producer for the whole run that uses the
input's security settings. So a missing topic or an unreachable broker never
blocks training: lines that cannot be queued or sent are counted
(``bad.dead_letter_failed`` in the status line) and logged at a bounded rate.
The producer sends with ``acks="all"`` (idempotent), so a line acknowledged
before a broker died is on the topic's other replicas. The topic is not
created here: create it with the replication of the update topic
(docs/operations.md, "Replication and broker failures").
"""
import logging
import queue
import threading
import time
from typing import Any, Dict, Optional, Tuple

from kafka import KafkaProducer

from easyonline.config.kafka_settings import bootstrap_servers, connect_timeout, security_settings
from easyonline.core.errors import error_text
from easyonline.core.rejections import rejection_kind

log = logging.getLogger(__name__)

MAX_QUEUED = 10000  # lines waiting for the sender; more are dropped (and counted)
RETRY_SECS = 30.0  # after a producer could not be built, wait this long before the next try
_STOP = object()


class DeadLetterSink:
    def __init__(self, server: str, topic: str, model_name: str, settings: Optional[Dict[str, Any]] = None):
        self.server, self.topic, self.model_name = server, topic, model_name
        self._settings = security_settings(settings or {})
        self._producer: Optional[KafkaProducer] = None
        self._queue: "queue.Queue" = queue.Queue(MAX_QUEUED)
        self._thread: Optional[threading.Thread] = None
        self._retry_at = 0.0
        self._connect_error = ""
        self.sent = 0
        self.failed = 0

    def _failure(self, error) -> None:
        self.failed += 1
        if self.failed == 1 or self.failed % 1000 == 0:
            log.error("dead-letter topic %s: %d sample(s) could not be sent (%s)", self.topic, self.failed, error)

    def send(self, line: bytes, reason: str) -> None:
        """Queues ``line`` for the sender thread; never blocks."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="dead-letter", daemon=True)
            self._thread.start()
        try:
            self._queue.put_nowait((line, reason))
        except queue.Full:
            self._failure(f"{MAX_QUEUED} lines already wait to be sent")

    def _ensure_producer(self) -> bool:
        if self._producer is not None:
            return True
        if time.time() < self._retry_at:
            return False
        try:
            self._producer = KafkaProducer(bootstrap_servers=bootstrap_servers(self.server), acks="all", linger_ms=50,
                                           max_block_ms=10000, **connect_timeout(5000),
                                           client_id="easyonline-dead-letter", **self._settings)
            return True
        except Exception as e:  # pylint: disable=broad-except
            self._retry_at = time.time() + RETRY_SECS
            self._connect_error = error_text(e)
            return False

    def _send_one(self, item: Tuple[bytes, str]) -> None:
        line, reason = item
        if not self._ensure_producer():
            self._failure(f"cannot connect to {self.server}: {self._connect_error}; "
                          f"next try in {self._retry_at - time.time():.0f} s")
            return
        headers = [("reason", reason.encode()), ("kind", rejection_kind(reason).encode()),
                   ("model", self.model_name.encode())]
        producer = self._producer
        assert producer is not None  # (_ensure_producer made it)
        try:
            producer.send(self.topic, value=line, headers=headers).add_errback(self._failure)
            self.sent += 1
        except Exception as e:  # pylint: disable=broad-except
            self._failure(e)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            self._send_one(item)

    def close(self, timeout: float = 10) -> None:
        """Sends what is queued, within ``timeout`` seconds; what is left is counted as failed."""
        deadline = time.time() + timeout
        if self._thread is not None:
            try:
                self._queue.put(_STOP, timeout=timeout)
            except queue.Full:
                pass
            self._thread.join(max(deadline - time.time(), 0))
            if self._thread.is_alive():
                self._failure(f"{self._queue.qsize()} line(s) still queued at stop")
        if self._producer is not None:
            try:
                self._producer.flush(max(deadline - time.time(), 0.1))
                self._producer.close(max(deadline - time.time(), 0.1))
            except Exception as e:  # pylint: disable=broad-except
                log.error("dead-letter topic %s: flush failed: %s", self.topic, e)
            self._producer = None
