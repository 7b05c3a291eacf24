"""Secrets in the config: ${NAME} references resolved from the environment, never saved or printed."""
import pytest

from easyonline.config import ConfigError, parse_pipeline_config, to_text
from easyonline.config.secrets import resolve_env
from easyonline.config.kafka_settings import extra_consumer_config

CONFIG = """
model_dir: "/tmp/x"
kafka_train_input {
  server: "127.0.0.1:9092" topic: "t" group: "g"
  config { key: "security_protocol" value: "SASL_PLAINTEXT" }
  config { key: "sasl_mechanism" value: "SCRAM-SHA-256" }
  config { key: "sasl_plain_username" value: "trainer" }
  config { key: "sasl_plain_password" value: "hunter2-in-the-file" }
}
train_config { incr_save_config { kafka { server: "127.0.0.1:9092" topic: "u"
  config { key: "sasl_plain_password" value: "${UPDATES_PASSWORD}" } } } }
"""


def test_saved_text_redacts_secrets_and_keeps_references():
    text = to_text(parse_pipeline_config(CONFIG))
    assert "hunter2-in-the-file" not in text and "<redacted>" in text
    assert "${UPDATES_PASSWORD}" in text and "SCRAM-SHA-256" in text and "trainer" in text


def test_references_are_read_from_the_environment(monkeypatch):
    config = parse_pipeline_config(CONFIG)
    config.kafka_train_input.config["sasl_plain_password"] = "${TRAIN_PASSWORD}"
    monkeypatch.setenv("TRAIN_PASSWORD", "from-env")
    settings = extra_consumer_config(config.kafka_train_input, "kafka_train_input")
    assert settings["sasl_plain_password"] == "from-env" and settings["security_protocol"] == "SASL_PLAINTEXT"
    monkeypatch.delenv("TRAIN_PASSWORD")
    with pytest.raises(ConfigError, match=r"kafka_train_input.config\[sasl_plain_password\].*TRAIN_PASSWORD"):
        extra_consumer_config(config.kafka_train_input, "kafka_train_input")


def test_plain_values_pass_through():
    assert resolve_env("SCRAM-SHA-512") == "SCRAM-SHA-512" and resolve_env("a${B}") == "a${B}"
