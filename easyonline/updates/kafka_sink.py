"""Publishes update messages to a Kafka topic, durably and in order.

One partition, ``acks="all"`` and one request in flight, so retries can
never reorder messages; ``send`` returns only once every message is
acknowledged. The topic is created when missing.
"""
import logging
from typing import Dict, List, Optional, Tuple

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from easyonline.config.kafka_settings import bootstrap_servers, connect_timeout, typed_setting
from easyonline.protos import pipeline_pb2

log = logging.getLogger(__name__)
PARTITION = 0


class KafkaSink:
    """``connect`` (may raise), then ``send`` batches of messages; ``close`` at the end."""

    def __init__(self, kafka: pipeline_pb2.IncrSaveConfig.Kafka, max_message_bytes: int, send_timeout_secs: float = 30):
        self.kafka = kafka
        self.description = f"kafka topic {kafka.topic} at {kafka.server}"
        self.target = f"kafka topic {kafka.topic}"  # what the stream's numbering belongs to (brokers may move)
        self._max_bytes = max_message_bytes
        self._timeout = send_timeout_secs
        self._producer: Optional[KafkaProducer] = None
        self._extra: Dict = {key: typed_setting(value, f"train_config.incr_save_config.kafka.config[{key}]")
                             for key, value in kafka.config.items()}

    def _client_settings(self) -> Dict:
        settings = {k: v for k, v in self._extra.items() if k in KafkaAdminClient.DEFAULT_CONFIG}
        settings.update(bootstrap_servers=bootstrap_servers(self.kafka.server), request_timeout_ms=10000,
                        **connect_timeout(5000))
        return settings

    def connect(self) -> None:
        if self._producer is not None:
            return
        self._ensure_topic()
        settings = dict(bootstrap_servers=bootstrap_servers(self.kafka.server), acks="all", retries=10,
                        max_in_flight_requests_per_connection=1, max_request_size=self._max_bytes + 4096,
                        linger_ms=2, request_timeout_ms=10000, **connect_timeout(5000),
                        client_id="easyonline-updates")
        settings.update(self._extra)
        self._producer = KafkaProducer(**settings)

    def _ensure_topic(self) -> None:
        admin = KafkaAdminClient(client_id="easyonline-updates-admin", **self._client_settings())
        try:
            if self.kafka.topic not in admin.list_topics():
                try:
                    admin.create_topics([NewTopic(self.kafka.topic, 1, 1)])
                    log.info("created update topic %s", self.kafka.topic)
                except TopicAlreadyExistsError:
                    pass
        finally:
            admin.close()

    def send(self, messages: List[Tuple[int, bytes]], key: bytes) -> None:
        """Sends (sequence, message) pairs, waits for every acknowledgement; raises KafkaError on failure."""
        self.connect()
        assert self._producer is not None
        futures = [self._producer.send(self.kafka.topic, value=m, key=key, partition=PARTITION) for _, m in messages]
        self._producer.flush(timeout=self._timeout)
        for future in futures:
            if not future.is_done:
                raise KafkaError(f"no acknowledgement within {self._timeout:.0f} s")
            future.get(timeout=0)  # raises the send's error

    def reset(self) -> None:
        """Drops the producer after a failure; the next send reconnects."""
        if self._producer is not None:
            try:
                self._producer.close(timeout=1)
            except Exception:  # pylint: disable=broad-except
                pass
            self._producer = None

    def close(self) -> None:
        self.reset()
