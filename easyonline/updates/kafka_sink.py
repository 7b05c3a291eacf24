"""Publishes update messages to a Kafka topic, durably and in order.

One partition, ``acks="all"``, the idempotent producer and one request in
flight: the producer's own retries (a leader that moved, a broker that died,
until ``send_timeout_secs``) can neither reorder nor duplicate messages, and
``send`` returns only once every message is acknowledged by the in-sync
replicas. The topic is created when missing, with ``replication_factor``
replicas (default: min(3, brokers in the cluster)) and ``min_insync_replicas``
(default: 2 with 3 replicas or more), so one broker that dies loses no
acknowledged update and does not stop publishing (docs/operations.md,
"Replication and broker failures").
"""
import logging
import time
from typing import Dict, List, Optional, Tuple

from kafka import KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from easyonline.config.kafka_settings import bootstrap_servers, connect_timeout, typed_setting
from easyonline.core.errors import error_text
from easyonline.protos import pipeline_pb2
from easyonline.utils import kafka_access

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
        self._leader: Optional[int] = None  # partition 0's leader at the last send
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
        settings = dict(bootstrap_servers=bootstrap_servers(self.kafka.server), acks="all",
                        enable_idempotence=True, max_in_flight_requests_per_connection=1,
                        max_request_size=self._max_bytes + 4096, linger_ms=2, request_timeout_ms=10000,
                        delivery_timeout_ms=int(self._timeout * 1000), **connect_timeout(5000),
                        client_id="easyonline-updates")
        settings.update(self._extra)
        if settings["acks"] not in ("all", -1) and "enable_idempotence" not in self._extra:
            settings["enable_idempotence"] = False  # (kafka-python refuses idempotence without acks=all)
            log.warning("update topic %s: config[acks]=%s: an update acknowledged by the leader alone is lost if "
                        "that broker dies before its followers copied it", self.kafka.topic, settings["acks"])
        self._producer = kafka_access.started_client(KafkaProducer, **settings)

    def _ensure_topic(self) -> None:
        admin = kafka_access.started_client(KafkaAdminClient, client_id="easyonline-updates-admin",
                                            **self._client_settings())
        try:
            brokers = cluster_size(admin)
            described = [t for t in admin.describe_topics([self.kafka.topic]) if t.get("error_code", 0) == 0]
            if described:
                self._check_replication(described[0], brokers)
                return
            replication, min_insync = topic_replication(self.kafka, brokers)
            configs = {"min.insync.replicas": str(min_insync)} if min_insync > 1 else {}
            try:
                admin.create_topics([NewTopic(self.kafka.topic, 1, replication, topic_configs=configs)])
                log.info("created update topic %s: 1 partition, replication factor %d, min.insync.replicas %d "
                         "(%d broker(s) in the cluster)", self.kafka.topic, replication, min_insync, brokers)
            except TopicAlreadyExistsError:
                pass
            except KafkaError as e:
                raise KafkaError(f"creating update topic {self.kafka.topic} with replication factor {replication} "
                                 f"on {brokers} broker(s) failed: {error_text(e)}") from e
        finally:
            admin.close()

    def _check_replication(self, described: Dict, brokers: int) -> None:
        """A warning, once per connect, when the existing topic has fewer replicas than the default wants."""
        replicas = min((len(p.get("replica_nodes") or ()) for p in described.get("partitions") or ()), default=0)
        wanted = self.kafka.replication_factor or min(3, brokers)
        if 0 < replicas < wanted:
            log.warning("update topic %s has replication factor %d (%d wanted, %d broker(s)): while the broker "
                        "holding it is down nothing is published, and updates it acknowledged may be lost; "
                        "recreate it or add replicas (kafka-reassign-partitions)", self.kafka.topic, replicas,
                        wanted, brokers)

    def send(self, messages: List[Tuple[int, bytes]], key: bytes) -> None:
        """Sends (sequence, message) pairs, waits for every acknowledgement; raises KafkaError on failure."""
        self.connect()
        assert self._producer is not None
        futures = [self._producer.send(self.kafka.topic, value=m, key=key, partition=PARTITION) for _, m in messages]
        started = time.time()
        self._producer.flush(timeout=self._timeout)
        for future in futures:
            if not future.is_done:
                raise KafkaError(f"no acknowledgement within {self._timeout:.0f} s")
            future.get(timeout=0)  # raises the send's error
        self._note_leader(time.time() - started)

    def _note_leader(self, took: float) -> None:
        """One line when partition 0's leader is another broker than at the last send (a broker died or was
        stopped, or leadership went back to it): the producer's retries carried the messages over."""
        try:
            leader = self._producer._metadata.leader_for_partition(  # type: ignore[union-attr]  # pylint: disable=protected-access
                TopicPartition(self.kafka.topic, PARTITION))
        except Exception:  # pylint: disable=broad-except  (kafka-python's internals: a line less, nothing more)
            return
        if leader is None or leader < 0:
            return
        if self._leader is not None and leader != self._leader:
            log.warning("update topic %s: the leader moved from broker %d to broker %d (broker %d died, was stopped "
                        "or handed leadership back); publishing goes on, this send was acknowledged after %.1f s",
                        self.kafka.topic, self._leader, leader, self._leader, took)
        self._leader = leader

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


def cluster_size(admin: KafkaAdminClient) -> int:
    """Brokers registered in the cluster (a broker that is down but registered counts: the topic is for the
    cluster, not for this minute)."""
    try:
        return max(len(admin.describe_cluster().get("brokers") or ()), 1)
    except KafkaError:  # a broker without DescribeCluster or metadata of brokers
        return 1


def topic_replication(kafka: pipeline_pb2.IncrSaveConfig.Kafka, brokers: int) -> Tuple[int, int]:
    """(replication factor, min.insync.replicas) of a topic created on a cluster of ``brokers``: the config's,
    else min(3, brokers) and 2 when that is 3 or more (else 1)."""
    replication = kafka.replication_factor or min(3, max(brokers, 1))
    min_insync = kafka.min_insync_replicas or (2 if replication >= 3 else 1)
    return replication, min(min_insync, replication)
