"""Sends rejected samples to a dead-letter topic, with why, for someone to look at later.

The record value is the rejected line (or the first bytes of a rejected
message); headers carry ``reason``, ``kind`` and ``model``. Sending is
asynchronous (kafka-python buffers and batches) and never stops training:
failures are counted and logged.
"""
import logging
from typing import Optional

from kafka import KafkaProducer

from easyonline.config.kafka_settings import bootstrap_servers
from easyonline.core.rejections import rejection_kind

log = logging.getLogger(__name__)


class DeadLetterSink:
    def __init__(self, server: str, topic: str, model_name: str):
        self.server, self.topic, self.model_name = server, topic, model_name
        self._producer: Optional[KafkaProducer] = None
        self.sent = 0
        self.failed = 0

    def _failure(self, error) -> None:
        self.failed += 1
        if self.failed == 1 or self.failed % 1000 == 0:
            log.error("dead-letter topic %s: %d sample(s) could not be sent (%s)", self.topic, self.failed, error)

    def send(self, line: bytes, reason: str) -> None:
        try:
            if self._producer is None:
                self._producer = KafkaProducer(bootstrap_servers=bootstrap_servers(self.server), acks=1, linger_ms=50,
                                               api_version_auto_timeout_ms=5000, client_id="easyonline-dead-letter")
            headers = [("reason", reason.encode()), ("kind", rejection_kind(reason).encode()),
                       ("model", self.model_name.encode())]
            self._producer.send(self.topic, value=line, headers=headers).add_errback(self._failure)
            self.sent += 1
        except Exception as e:  # pylint: disable=broad-except
            self._failure(e)

    def close(self, timeout: float = 10) -> None:
        if self._producer is not None:
            try:
                self._producer.flush(timeout)
                self._producer.close(timeout)
            except Exception as e:  # pylint: disable=broad-except
                log.error("dead-letter topic %s: flush failed: %s", self.topic, e)
            self._producer = None
