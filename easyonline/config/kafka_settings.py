"""The ``config { key: value }`` maps of Kafka sections, as the typed settings kafka-python takes.

Lives with the config because the validator checks these maps at start
(unknown keys, ``${NAME}`` references) as much as the clients use them.
"""
from typing import Any, Dict, List

from kafka import KafkaConsumer

from easyonline.config.easyrec_compat import LIBRDKAFKA_TO_KAFKA_PYTHON
from easyonline.config.secrets import resolve_env
from easyonline.core.errors import ConfigError
from easyonline.protos import pipeline_pb2


def connect_timeout(ms: int) -> Dict[str, int]:
    """How long a client waits for a broker at start: kafka-python 2.0's api_version_auto_timeout_ms, 3.0's
    bootstrap_timeout_ms."""
    if "api_version_auto_timeout_ms" in KafkaConsumer.DEFAULT_CONFIG:
        return {"api_version_auto_timeout_ms": ms}
    return {"bootstrap_timeout_ms": ms}


def bootstrap_servers(server: str) -> List[str]:
    """``host:port,host:port`` as kafka-python's list."""
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


def consumer_settings_from_flags(pairs: List[str], flag: str) -> Dict[str, Any]:
    """``key=value`` strings (a repeated command-line flag) as kafka-python consumer kwargs."""
    settings = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(flag, f"expected key=value, got {pair!r}")
        if key not in KafkaConsumer.DEFAULT_CONFIG:
            raise ConfigError(f"{flag} {key}", "is not a kafka-python consumer setting")
        settings[key] = typed_setting(value, f"{flag} {key}")
    return settings


def security_settings(settings: Dict[str, Any]) -> Dict[str, Any]:
    """The connection-security part of a client's settings (``security_protocol``, ``ssl_*``, ``sasl_*``).

    Every client the project opens on a cluster (dead letters, exports,
    servers, predictions) takes these from the section it connects through,
    so a SASL/SSL cluster works for all of them, not only for the trainer's
    consumer.
    """
    return {key: value for key, value in settings.items()
            if key == "security_protocol" or key.startswith(("ssl_", "sasl_"))}


# kafka-python setting -> librdkafka property (the first librdkafka name of each in the EasyRec table).
KAFKA_PYTHON_TO_LIBRDKAFKA: Dict[str, str] = {}
for _name, _setting in LIBRDKAFKA_TO_KAFKA_PYTHON.items():
    KAFKA_PYTHON_TO_LIBRDKAFKA.setdefault(_setting, _name)


def confluent_kafka_module(path: str):
    """The confluent_kafka module (``client: CONFLUENT_KAFKA``); its absence is a ConfigError naming ``path``."""
    try:
        import confluent_kafka  # pylint: disable=g-import-not-at-top
    except ImportError:
        raise ConfigError(f"{path}.client", "CONFLUENT_KAFKA needs the confluent-kafka package "
                          "(pip install confluent-kafka, or set client: KAFKA_PYTHON)") from None
    return confluent_kafka


def librdkafka_config(kafka: pipeline_pb2.KafkaInput, path: str, client_id: str) -> Dict[str, object]:
    """The section's ``config`` map (kafka-python names) as librdkafka properties; a setting with no
    equivalent is a ConfigError naming it."""
    config: Dict[str, object] = {"bootstrap.servers": kafka.server, "group.id": kafka.group or "easyonline",
                                 "enable.auto.commit": False, "enable.auto.offset.store": False,
                                 "client.id": client_id, "fetch.wait.max.ms": 100,
                                 "isolation.level": "read_uncommitted" if kafka.isolation_level
                                 == pipeline_pb2.KafkaInput.READ_UNCOMMITTED else "read_committed"}
    for key, value in extra_consumer_config(kafka, path).items():
        if key not in KAFKA_PYTHON_TO_LIBRDKAFKA:
            raise ConfigError(f"{path}.config[{key}]", "has no librdkafka equivalent (client: CONFLUENT_KAFKA, the "
                              "default data client; client: KAFKA_PYTHON takes every kafka-python setting); "
                              f"known: {', '.join(sorted(KAFKA_PYTHON_TO_LIBRDKAFKA))}")
        config[KAFKA_PYTHON_TO_LIBRDKAFKA[key]] = value
    return config
