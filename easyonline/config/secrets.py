"""Secrets in the config: read from the environment, never written back out.

Any value of a Kafka ``config { }`` map and of ``oss_config`` may be
``${NAME}``: it is replaced by the environment variable NAME when used, so
passwords and keys need not be in the config file. Whatever the value, the
text the trainer saves (``model_dir/pipeline.config``, the export's asset)
and prints goes through ``redacted``: secret fields and map entries whose
key names a secret are replaced by ``<redacted>``, ``${NAME}`` references
are kept (they are not secrets).
"""
import os
import re

from easyonline.core.errors import ConfigError
from easyonline.protos import pipeline_pb2
from easyonline.utils import oss

REDACTED = "<redacted>"
_REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_SECRET_WORDS = ("password", "secret", "token", "sasl_oauth", "ssl_keyfile", "access_key")
_OSS_SECRET_FIELDS = ("access_key_id", "access_key_secret", "security_token")


def resolve_env(value: str, path: str = "") -> str:
    """``${NAME}`` -> the environment variable NAME (ConfigError naming ``path`` if unset); else ``value``."""
    match = _REFERENCE.match(value)
    if not match:
        return value
    name = match.group(1)
    if name not in os.environ:
        raise ConfigError(path, f"refers to the environment variable {name}, which is not set")
    return os.environ[name]


def is_secret_key(key: str) -> bool:
    return any(word in key.lower() for word in _SECRET_WORDS)


def _redact_map(config_map) -> None:
    for key in list(config_map):
        if is_secret_key(key) and not _REFERENCE.match(config_map[key]):
            config_map[key] = REDACTED


def redacted(config: pipeline_pb2.PipelineConfig) -> pipeline_pb2.PipelineConfig:
    """A copy without secrets, fit to save or print."""
    out = pipeline_pb2.PipelineConfig()
    out.CopyFrom(config)
    for name in ("kafka_train_input", "kafka_eval_input"):
        if out.HasField(name):
            _redact_map(getattr(out, name).config)
    if out.train_config.HasField("incr_save_config") and out.train_config.incr_save_config.HasField("kafka"):
        _redact_map(out.train_config.incr_save_config.kafka.config)
    incr = out.train_config.incr_save_config
    if incr.signing_secret and not _REFERENCE.match(incr.signing_secret):  # a literal secret
        incr.signing_secret = REDACTED
    if out.HasField("oss_config"):
        for field in _OSS_SECRET_FIELDS:
            value = getattr(out.oss_config, field)
            if value and not _REFERENCE.match(value):
                setattr(out.oss_config, field, REDACTED)
    return out


def apply_oss_config(config: pipeline_pb2.PipelineConfig) -> None:
    """Configures oss:// access from ``oss_config`` (values may be ``${NAME}``); nothing if absent."""
    if not config.HasField("oss_config"):
        return
    c = config.oss_config
    oss.configure(resolve_env(c.endpoint, "oss_config.endpoint"),
                  resolve_env(c.access_key_id, "oss_config.access_key_id"),
                  resolve_env(c.access_key_secret, "oss_config.access_key_secret"),
                  resolve_env(c.security_token, "oss_config.security_token"))
