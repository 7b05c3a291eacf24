"""Both clients read at the same isolation level: committed data unless the config says otherwise."""
from easyonline.config.kafka_settings import librdkafka_config
from easyonline.inputs.kafka_client import isolation_level
from easyonline.protos import pipeline_pb2


def _kafka(**fields):
    return pipeline_pb2.KafkaInput(server="127.0.0.1:9092", topic="t", **fields)


def test_committed_by_default_for_both_clients():
    kafka = _kafka()
    assert isolation_level(kafka) == "read_committed"
    assert librdkafka_config(kafka, "kafka_train_input", "c")["isolation.level"] == "read_committed"


def test_the_field_and_the_config_map_set_it_for_both_clients():
    kafka = _kafka(isolation_level=pipeline_pb2.KafkaInput.READ_UNCOMMITTED)
    assert isolation_level(kafka) == "read_uncommitted"
    assert librdkafka_config(kafka, "kafka_train_input", "c")["isolation.level"] == "read_uncommitted"
    mapped = _kafka(config={"isolation_level": "read_uncommitted"})  # also EasyRec's isolation.level, translated
    assert isolation_level(mapped) == "read_uncommitted"
    assert librdkafka_config(mapped, "kafka_train_input", "c")["isolation.level"] == "read_uncommitted"
