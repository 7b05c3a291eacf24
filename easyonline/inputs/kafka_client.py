"""Builds kafka-python clients from a KafkaInput config, one way for every caller."""
from kafka import KafkaConsumer
from kafka import errors as kafka_errors
from kafka.errors import KafkaError

from easyonline.config.kafka_settings import bootstrap_servers, connect_timeout, extra_consumer_config
from easyonline.core.errors import BrokerUnreachableError
from easyonline.protos import pipeline_pb2


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
    try:
        return KafkaConsumer(**settings)
    except getattr(kafka_errors, "NoBrokersAvailable", kafka_errors.KafkaConnectionError):  # its 2.0 / 3.0 name
        raise BrokerUnreachableError(f"{path}.server: no Kafka broker answered at {kafka.server}") from None
    except KafkaError as e:
        raise BrokerUnreachableError(f"{path}.server: cannot connect to Kafka at {kafka.server}: {e}") from None
