"""Compressed topics: gzip, snappy, lz4 and zstd batches work for every consumer and producer.

The samples are written by confluent-kafka (librdkafka: the client of EasyRec's data path and of most
production producers), one codec per partition, through Apache Kafka (which stores each batch as its
producer compressed it). The trainer reads them through its reader process with the default data client
(librdkafka), the eval job through its own consumer with the other one (kafka-python, whose decompression
the test watches), and the trainer publishes its updates compressed (zstd: kafka-python sends a batch
uncompressed when a codec does not make it smaller, which lz4 and snappy do not for float rows); the update
reader (serving's) decompresses them and rebuilds the trainer exactly.
"""
import confluent_kafka
import pytest
from kafka.record import default_records

from easyonline.eval.evaluator import Evaluator
from easyonline.jobs.online_train import build_trainer
from easyonline.tools.stream_producer import SyntheticCtrStream
from easyonline.updates.readers import KafkaUpdateReader
from tests.conftest import online_config
from tests.integration.test_incremental_updates import FAST, _replay, assert_replica_equals_trainer

CODECS = ("gzip", "snappy", "lz4", "zstd")
PER_PARTITION = 1500

BROKER = "apache_kafka"  # (tests/conftest.py)


@pytest.fixture
def codec_seen(monkeypatch):
    """The codec of every record batch this process decompresses (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)."""
    seen = []
    original = default_records.DefaultRecordBatch._maybe_uncompress  # pylint: disable=protected-access

    def spy(self):
        seen.append(self.compression_type)
        return original(self)

    monkeypatch.setattr(default_records.DefaultRecordBatch, "_maybe_uncompress", spy)
    return seen


def test_librdkafka_compressed_samples_train_and_evaluate_and_updates_publish_compressed(
        broker, topic, tmp_path, codec_seen):
    broker.create_topic(topic, len(CODECS))
    lines = SyntheticCtrStream().lines(0, PER_PARTITION * len(CODECS))
    for partition, codec in enumerate(CODECS):
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec,
                                             "linger.ms": 20})
        for line in lines[partition * PER_PARTITION:(partition + 1) * PER_PARTITION]:
            producer.produce(topic, line, partition=partition)
        assert producer.flush(30) == 0
    updates = topic + "_updates"
    config = online_config(tmp_path / "model", broker.bootstrap, topic, **FAST, **{
        "train_config.incr_save_config": {"sparse_save_steps": 2, "dense_save_steps": 5, "kafka": {
            "server": broker.bootstrap, "topic": updates, "config": {"compression_type": "zstd"}}}})
    config.kafka_eval_input.CopyFrom(config.kafka_train_input)
    config.kafka_eval_input.client = config.kafka_eval_input.KAFKA_PYTHON  # the train input: the default, librdkafka

    trainer = build_trainer(config, online=False)  # the config's own input: the reader process
    summary = trainer.run()
    assert summary.samples == len(lines) and summary.rejected == 0
    assert summary.positions == {p: PER_PARTITION for p in range(len(CODECS))}

    evaluator = Evaluator(config, str(tmp_path / "eval"))
    result = evaluator.evaluate(summary.checkpoint)
    evaluator.close()
    assert result.samples == len(lines) and result.rejected == 0
    assert set(codec_seen) >= {1, 2, 3, 4}  # the eval job's consumer decompressed every codec

    codec_seen.clear()
    reader = KafkaUpdateReader(broker.bootstrap, updates)
    records = reader.read_available()
    reader.close()
    assert records and set(codec_seen) == {4}  # the updates were written zstd-compressed
    assert_replica_equals_trainer(_replay(records, "model"), trainer, tmp_path / "model")
