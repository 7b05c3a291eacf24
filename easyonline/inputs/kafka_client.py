"""Builds kafka-python clients from a KafkaInput config, one way for every caller."""
import time

from kafka import KafkaConsumer
from kafka import errors as kafka_errors
from kafka.errors import KafkaError

from easyonline.config.kafka_settings import bootstrap_servers, connect_timeout, extra_consumer_config
from easyonline.core.errors import BrokerUnreachableError
from easyonline.protos import pipeline_pb2
from easyonline.utils import kafka_access


def isolation_level(kafka: pipeline_pb2.KafkaInput) -> str:
    """kafka-python's name of the section's isolation level: the ``config`` map's ``isolation_level`` (also
    EasyRec's ``isolation.level``, translated into it) when given, else the field's."""
    if "isolation_level" in kafka.config:
        return kafka.config["isolation_level"].strip().lower()
    return "read_uncommitted" if kafka.isolation_level == pipeline_pb2.KafkaInput.READ_UNCOMMITTED \
        else "read_committed"


def make_consumer(kafka: pipeline_pb2.KafkaInput, path: str = "kafka_train_input", **overrides) -> KafkaConsumer:
    """A consumer with no subscription (callers assign partitions), auto-commit off, reading at the
    section's ``isolation_level`` (committed data only by default)."""
    settings = dict(bootstrap_servers=bootstrap_servers(kafka.server), group_id=kafka.group or None,
                    enable_auto_commit=False, auto_offset_reset="earliest", client_id=f"easyonline-{path}",
                    request_timeout_ms=30000, isolation_level=isolation_level(kafka), **connect_timeout(10000))
    settings.update(extra_consumer_config(kafka, path))
    settings.update(overrides)
    section = path.removesuffix(".probe")
    started = time.time()
    try:
        consumer = kafka_access.started_client(KafkaConsumer, **settings)
    except getattr(kafka_errors, "NoBrokersAvailable", kafka_errors.KafkaConnectionError):  # its 2.0 / 3.0 name
        raise kafka_access.refusal(started, settings, kafka.server, f"{section}.config") or BrokerUnreachableError(
            f"{path}.server: no Kafka broker answered at {kafka.server}") from None
    except KafkaError as e:
        raise kafka_access.refusal(started, settings, kafka.server, f"{section}.config") or BrokerUnreachableError(
            f"{path}.server: cannot connect to Kafka at {kafka.server}: {e}") from None
    if kafka.topic and not consumer.partitions_for_topic(kafka.topic):
        check_topic_access(settings, kafka.topic, f"{section}.topic", kafka.server, consumer)
    return consumer


def check_topic_access(settings: dict, topic: str, where: str, server: str, consumer=None) -> None:
    """Raises KafkaAccessError when the principal may not DESCRIBE ``topic`` (it then looks missing: Kafka
    answers so for a topic that does not exist as well); nothing when the topic is simply not there yet.
    Asked only when the topic is not visible (one more connection)."""
    from kafka.admin import KafkaAdminClient  # pylint: disable=g-import-not-at-top
    admin_settings = {k: v for k, v in settings.items() if k in KafkaAdminClient.DEFAULT_CONFIG}
    try:
        admin = kafka_access.started_client(KafkaAdminClient, **{**admin_settings, "client_id": "easyonline-access-check"})
    except Exception:  # pylint: disable=broad-except  (unreachable now: the caller's own wait and error say so)
        return
    try:
        described = admin.describe_topics([topic])
    except Exception:  # pylint: disable=broad-except  (a broker without DescribeTopics: the caller waits)
        return
    finally:
        admin.close()
    if any(t.get("error_code") == kafka_errors.TopicAuthorizationFailedError.errno for t in described):
        if consumer is not None:
            consumer.close()
        raise kafka_access.denied(settings, "DESCRIBE", "topic", topic, f"{where}; READ includes DESCRIBE; a topic "
                                  "it may not describe looks missing", server)
