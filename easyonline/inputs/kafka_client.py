"""Builds kafka-python clients from a KafkaInput config, one way for every caller."""
from typing import Any, Dict

from kafka import KafkaConsumer
from kafka.errors import KafkaError, NoBrokersAvailable

from easyonline.config.errors import ConfigError
from easyonline.config.secrets import resolve_env
from easyonline.protos import pipeline_pb2


class BrokerUnreachableError(ConnectionError):
    """No broker in ``server`` answered."""


def bootstrap_servers(server: str):
    return [s.strip() for s in server.split(",") if s.strip()]


def typed_setting(value: str, path: str = "") -> Any:
    """A config-map string as the bool, int, float or str kafka-python expects (``${NAME}``: from the
    environment)."""
    value = resolve_env(value, path)
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def extra_consumer_config(kafka: pipeline_pb2.KafkaInput, path: str) -> Dict[str, Any]:
    """The ``config { key: value }`` map as kafka-python consumer kwargs, unknown keys rejected."""
    extra = {}
    for key, value in kafka.config.items():
        if key not in KafkaConsumer.DEFAULT_CONFIG:
            raise ConfigError(f"{path}.config[{key}]", "is not a kafka-python consumer setting")
        extra[key] = typed_setting(value, f"{path}.config[{key}]")
    return extra


def make_consumer(kafka: pipeline_pb2.KafkaInput, path: str = "kafka_train_input", **overrides) -> KafkaConsumer:
    """A consumer with no subscription (callers assign partitions), auto-commit off."""
    settings = dict(bootstrap_servers=bootstrap_servers(kafka.server), group_id=kafka.group or None,
                    enable_auto_commit=False, auto_offset_reset="earliest", client_id=f"easyonline-{path}",
                    request_timeout_ms=30000, api_version_auto_timeout_ms=10000)
    settings.update(extra_consumer_config(kafka, path))
    settings.update(overrides)
    try:
        return KafkaConsumer(**settings)
    except NoBrokersAvailable:
        raise BrokerUnreachableError(f"{path}.server: no Kafka broker answered at {kafka.server}") from None
    except KafkaError as e:
        raise BrokerUnreachableError(f"{path}.server: cannot connect to Kafka at {kafka.server}: {e}") from None
