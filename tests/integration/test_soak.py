"""Soak: 5% malformed messages of every kind and two 6-second broker outages; nothing lost, counted exactly."""
import threading
import time

import pytest

from easyonline.updates.param_ids import read_parameter_ids
from easyonline.updates.model_diff import differences_from_model
from easyonline.updates.replica import ParameterReplica
from easyonline.updates.codec import decode_update
from easyonline.updates.readers import KafkaUpdateReader
from easyonline.tools.local_broker import LocalBroker
from easyonline.tools.stream_producer import SyntheticCtrStream, produce
from easyonline.core.callbacks import Callback
from easyonline.jobs.online_train import build_trainer
from tests.conftest import online_config
from tests.integration.test_bad_input import _stream


def _wait(condition, timeout):
    deadline = time.time() + timeout
    while not condition() and time.time() < deadline:
        time.sleep(0.2)
    return condition()


# Past the update producer's request timeout, lowered from its 10 s to 4 s through the topic's producer
# settings (two 12 s outages cost 24 s of the suite): its sends time out and are retried either way.
UPDATE_REQUEST_TIMEOUT_MS = 4000
OUTAGE_SECS = 6


@pytest.fixture
def own_broker(tmp_path):
    """A broker for this test alone: freezing the session's broker could upset the tests after it."""
    with LocalBroker(log_path=str(tmp_path / "broker.log")) as b:
        yield b


def test_soak_bad_input_and_two_broker_outages(own_broker, tmp_path):
    """The broker is frozen with SIGSTOP twice (the tansu broker loses its data on a restart)."""
    broker, topic = own_broker, "soak"
    broker.create_topic(topic, 2)
    lines, injected = _stream(9000, 20)  # 450 bad messages (5%), 75 of each kind
    thirds = [lines[:len(lines) // 3], lines[len(lines) // 3: 2 * len(lines) // 3], lines[2 * len(lines) // 3:]]
    good = set(SyntheticCtrStream().lines(0, 9000))
    good_in = [sum(1 for line in part if line in good) for part in thirds]
    produce(broker.bootstrap, topic, [thirds[0]], partitions=2)
    updates = topic + "_updates"
    config = online_config(tmp_path / "m", broker.bootstrap, topic, **{
        "data_config.batch_size": 500, "data_config.max_message_bytes": 3000,
        "data_config.dead_letter_topic": topic + "_dead", "data_config.batch_timeout_ms": 200, "train_config.save_checkpoints_steps": 4,
        "train_config.save_checkpoints_secs": 0, "train_config.log_step_count_secs": 1,
        "train_config.incr_save_config": {"sparse_save_secs": 1, "dense_save_secs": 2,
                                          "kafka": {"server": broker.bootstrap, "topic": updates,
                                                    "config": {"request_timeout_ms": str(UPDATE_REQUEST_TIMEOUT_MS)}}}})
    trained = []

    class Count(Callback):
        def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
            trained.append(parsed_batch.size)

    trainer = build_trainer(config, online=True, callbacks=[Count()])
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("summary", trainer.run()), daemon=True)
    thread.start()
    expected_good = 0
    try:
        for part in range(3):
            expected_good += good_in[part]
            assert _wait(lambda: sum(trained) >= expected_good, 120), (part, sum(trained), expected_good)
            if part < 2:
                broker.pause()
                time.sleep(OUTAGE_SECS)  # reads, commits, publishes and dead letters fail or hang meanwhile
                broker.resume()
                produce(broker.bootstrap, topic, [thirds[part + 1]], partitions=2)
        # the last message can be a bad one on the other partition, in a later batch than the last good sample
        assert _wait(lambda: sum(trainer.positions.values()) >= len(lines), 60), (trainer.positions, len(lines))
    finally:
        broker.resume()
        trainer.stop("test done")
        thread.join(180)
    assert "summary" in result, "the trainer did not stop within 180 s"
    summary = result["summary"]
    assert summary.samples == 9000 and sum(trained) == 9000  # every good sample exactly once
    assert sum(summary.positions.values()) == len(lines)  # every message consumed
    assert {k: v for k, v in trainer.bad_input.counts.items() if v} == \
        {k: v for k, v in injected.items() if k != "empty_message"}
    assert trainer.bad_input.empty_messages == injected["empty_message"]
    reader = KafkaUpdateReader(broker.bootstrap, updates)
    records = reader.read_available()
    reader.close()
    replica = ParameterReplica("m")
    for _, data in records:
        replica.apply(decode_update(data))
    assert differences_from_model(replica, trainer.model, read_parameter_ids(str(tmp_path / "m"))) == []
