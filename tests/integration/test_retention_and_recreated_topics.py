"""Retention and a topic deleted and created again, behind a whole trainer, on Apache Kafka (issue 50).

Records are deleted with DeleteRecords (what retention does) and topics deleted and created again with
the admin client, while the trainer is stopped and while it runs (its Kafka reader in a child process).
Each test asserts exact counts: the samples trained, the offsets skipped, the positions saved.
"""
import threading
import time

import confluent_kafka
import pytest
from kafka import KafkaProducer

from easyonline.core.errors import ConfigError
from easyonline.core.exit_codes import BAD_CONFIG
from easyonline.jobs.online_train import build_trainer
from easyonline.protos import pipeline_pb2
from easyonline.tools.stream_producer import SyntheticCtrStream
from tests.conftest import online_config

BROKER = "apache_kafka"  # (tests/conftest.py)

FAST = {"data_config.batch_size": 100, "data_config.batch_timeout_ms": 200,
        "train_config.save_checkpoints_secs": 0, "train_config.log_step_count_secs": 1,
        "kafka_train_input.partition_refresh_secs": 1}
STREAM = SyntheticCtrStream()


def _produce(broker, topic, start, count):
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    for line in STREAM.lines(start, count):
        producer.send(topic, line, partition=0)
    producer.flush()
    producer.close()


def _config(broker, topic, model_dir, client="KAFKA_PYTHON", **fields):
    config = online_config(model_dir, broker.bootstrap, topic, **FAST)
    config.kafka_train_input.client = pipeline_pb2.KafkaInput.Client.Value(client)
    for name, value in fields.items():
        setattr(config.kafka_train_input, name, value)
    return config


def _train(config, online=False):
    trainer = build_trainer(config, online=online)
    backstop = threading.Timer(90, trainer.stop, args=("test backstop: the run did not end by itself",))
    backstop.start()
    try:
        return trainer.run()
    finally:
        backstop.cancel()


class RunningTrainer:
    """An online trainer run in a thread (its Kafka reader is its child process), stopped by the test."""

    def __init__(self, config):
        self.trainer = build_trainer(config, online=True)
        self.summary = None
        self.error = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        try:
            self.summary = self.trainer.run()
        except BaseException as e:  # pylint: disable=broad-except  (the test looks at it)
            self.error = e

    def wait_for(self, condition, what, timeout=60.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.error is not None:
                raise AssertionError(f"the trainer failed while waiting for {what}") from self.error
            if condition(self.trainer):
                return
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}: positions {self.trainer.positions}, "
                             f"samples {self.trainer.samples_trained()}")

    def ended(self, timeout=60.0):
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the trainer did not stop"
        return self

    def stop(self):
        self.trainer.stop("test: done")
        return self.ended()


# --- retention --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["RESUME_IN_RANGE", "FAIL_OUT_OF_RANGE"])
def test_retention_past_a_stopped_trainers_checkpoint_resumes_counted_or_fails(broker, topic, tmp_path, policy):
    """A trainer trains 300 samples and stops (checkpoint at 300); 300 more arrive and retention deletes
    offsets up to 400 before it restarts. RESUME_IN_RANGE: it resumes at the log start 400, says so, counts
    the 100 lost samples in ``offsets_skipped`` (summary and status line: before, only a loss while reading
    counted there) and trains exactly the 200 left. FAIL_OUT_OF_RANGE: the ConfigError naming the partition
    and the range, exit code BAD_CONFIG."""
    broker.create_topic(topic, 1)
    _produce(broker, topic, 0, 300)
    config = _config(broker, topic, tmp_path / "m",
                     on_offset_out_of_range=pipeline_pb2.KafkaInput.OnOffsetOutOfRange.Value(policy))
    first = _train(config)
    assert (first.samples, first.positions, first.offsets_skipped) == (300, {0: 300}, 0)
    _produce(broker, topic, 300, 300)
    broker.delete_records(topic, {0: 400})
    if policy == "FAIL_OUT_OF_RANGE":
        with pytest.raises(ConfigError, match=r"kafka_train_input.on_offset_out_of_range: topic '.*' partition 0: "
                                              r"the checkpoint's offset 300 is below its log start 400: 100 "
                                              r"samples were deleted before being trained") as failed:
            _train(config)
        assert failed.value.exit_code == BAD_CONFIG
        return
    second = _train(config)
    assert second.samples == 200 and second.positions == {0: 600}
    assert second.offsets_skipped == 100
    assert "partition 0 moved 300 -> 400 (below its log start 400: 100 samples were deleted" in second.start
    assert "offsets skipped  100 " in "\n".join(second.lines())


def test_retention_ahead_of_a_running_trainer_is_counted_and_the_rest_trained(broker, topic, tmp_path):
    """A running trainer (reader child process) has read offsets 0-299 and waits at 300 when offsets 300-399
    are deleted before it could read them (they were written in a transaction still open: a read_committed
    reader waits at the last stable offset, 300). It resumes at 400, counts exactly the 100 lost in
    ``offsets_skipped`` and trains exactly the 100 left (400-499; the commit marker is 500)."""
    broker.create_topic(topic, 1)
    _produce(broker, topic, 0, 300)
    running = RunningTrainer(_config(broker, topic, tmp_path / "m"))
    running.wait_for(lambda t: t.positions == {0: 300} and t.samples_trained() == 300, "300 samples")
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"r-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for line in STREAM.lines(300, 200):
        producer.produce(topic, line, partition=0)  # offsets 300-499
    assert producer.flush(30) == 0
    time.sleep(1.0)  # the reader fetches at 300 and gets nothing (the last stable offset)
    assert running.trainer.positions == {0: 300}
    broker.delete_records(topic, {0: 400})
    producer.commit_transaction(30)  # marker at 500
    running.wait_for(lambda t: t.positions == {0: 501}, "the rest")
    summary = running.stop().summary
    assert summary.samples == 400 and summary.offsets_skipped == 100 and summary.positions == {0: 501}


# --- a topic deleted and created again --------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["FAIL", "START_FROM_CONFIG"])
def test_a_topic_recreated_while_the_trainer_is_down_fails_or_is_read_from_its_start(broker, topic, tmp_path,
                                                                                        policy):
    """The topic is deleted and created again (same name, same partitions) after the trainer checkpointed at
    300; the new topic holds 200. Before, the checkpoint held only the name: its position 300 was taken as
    past the end and moved to the end, 200, so every sample of the new topic was skipped. Now the topic id
    saved with the positions tells: FAIL names both ids; START_FROM_CONFIG trains all 200 (the parameters
    kept: the samples count goes on from 300) and the next checkpoint holds the new id."""
    broker.create_topic(topic, 1)
    _produce(broker, topic, 0, 300)
    config = _config(broker, topic, tmp_path / "m",
                     on_topic_change=pipeline_pb2.KafkaInput.OnTopicChange.Value(policy))
    first = _train(config)
    assert (first.samples, first.positions) == (300, {0: 300})
    old_id = broker.topic_id(topic)
    broker.delete_topic(topic)
    broker.create_topic(topic, 1)
    new_id = broker.topic_id(topic)
    assert new_id != old_id
    _produce(broker, topic, 1000, 200)
    if policy == "FAIL":
        with pytest.raises(ConfigError, match=rf"kafka_train_input.topic: topic '{topic}' was deleted and created "
                                              rf"again: the checkpoint's positions are for its topic id {old_id}, "
                                              rf"the topic now has topic id {new_id}") as failed:
            _train(config)
        assert failed.value.exit_code == BAD_CONFIG
        return
    trainer = build_trainer(config, online=False)
    assert trainer.checkpointer.positions_topic_id == old_id
    summary = trainer.run()
    assert summary.samples == 200 and summary.positions == {0: 200} and summary.start == "earliest"
    assert summary.offsets_skipped == 0 and trainer.samples_trained() == 500
    assert trainer.checkpointer.positions_topic_id == new_id


@pytest.mark.parametrize("client,policy", [  # CI: each policy once (the other client's: a scenario)
    ("KAFKA_PYTHON", "FAIL"), pytest.param("CONFLUENT_KAFKA", "FAIL", marks=pytest.mark.scenario),
    ("CONFLUENT_KAFKA", "START_FROM_CONFIG"), pytest.param("KAFKA_PYTHON", "START_FROM_CONFIG",
                                                           marks=pytest.mark.scenario)])
def test_a_topic_recreated_under_a_running_trainer_fails_or_is_read_from_its_start(broker, topic, tmp_path, client,
                                                                                   policy):
    """A running trainer has trained 300 samples when the topic is deleted, created again and given 200
    new ones. Before, the reader's position 300 was out of range of the new topic and moved to its end:
    the 200 were skipped (counted, but lost). Now the reader sees the topic id change (at its partition
    refresh, or when the broker reports the position out of range) and applies on_topic_change: FAIL
    stops the run with the ConfigError naming both ids; START_FROM_CONFIG trains exactly the 200, skipping
    nothing, and the checkpoint holds the new topic's id and positions."""
    broker.create_topic(topic, 1)
    _produce(broker, topic, 0, 300)
    config = _config(broker, topic, tmp_path / "m", client,
                     on_topic_change=pipeline_pb2.KafkaInput.OnTopicChange.Value(policy))
    running = RunningTrainer(config)
    running.wait_for(lambda t: t.positions == {0: 300} and t.samples_trained() == 300, "300 samples")
    old_id = broker.topic_id(topic)
    assert running.trainer.topic_id == old_id
    broker.delete_topic(topic)
    broker.create_topic(topic, 1)
    new_id = broker.topic_id(topic)
    _produce(broker, topic, 1000, 200)
    if policy == "FAIL":
        running.ended()
        assert isinstance(running.error, ConfigError) and running.error.exit_code == BAD_CONFIG, running.error
        assert f"topic '{topic}' was deleted and created again while reading: its topic id was {old_id}, it is " \
               f"now {new_id}" in str(running.error)
        assert running.trainer.samples_trained() == 300
        return
    running.wait_for(lambda t: t.positions == {0: 200}, "the new topic's 200 samples")
    time.sleep(1.5)  # a refresh more: nothing read twice
    summary = running.stop().summary
    assert summary.samples == 500 and summary.positions == {0: 200} and summary.offsets_skipped == 0
    assert running.trainer.checkpointer.positions_topic_id == new_id
