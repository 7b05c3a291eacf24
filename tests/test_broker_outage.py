"""A broker outage mid-stream: training and publishing wait, then resume; no sample lost or repeated."""
import threading
import time

from easyonline.publish.param_ids import read_parameter_ids
from easyonline.publish.replica import ParameterReplica, differences_from_model
from easyonline.publish.update_codec import decode_update
from easyonline.publish.update_stream import KafkaUpdateReader
from easyonline.tools.stream_producer import SyntheticCtrStream, produce
from easyonline.train.callbacks import Callback
from easyonline.train.trainer import OnlineTrainer
from tests.conftest import online_config


def _wait(condition, timeout):
    deadline = time.time() + timeout
    while not condition() and time.time() < deadline:
        time.sleep(0.2)
    return condition()


def test_training_and_publishing_survive_a_broker_outage(broker, topic, tmp_path):
    """The session broker is frozen with SIGSTOP for 12 s (the tansu broker loses data on restart)."""
    broker.create_topic(topic, 2)
    stream = SyntheticCtrStream()
    produce(broker.bootstrap, topic, stream.chunks(0, 3000), partitions=2)
    updates = topic + "_updates"
    config = online_config(tmp_path / "m", broker.bootstrap, topic, **{
        "data_config.batch_size": 500, "data_config.batch_timeout_ms": 200, "train_config.save_checkpoints_steps": 4,
        "train_config.save_checkpoints_secs": 0, "train_config.log_step_count_secs": 1,
        "train_config.incr_save_config": {"sparse_save_secs": 1, "dense_save_secs": 2,
                                          "kafka": {"server": broker.bootstrap, "topic": updates}}})
    trained = []

    class Count(Callback):
        def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
            trained.append(parsed_batch.size)

    trainer = OnlineTrainer(config, online=True, callbacks=[Count()])
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("summary", trainer.run()), daemon=True)
    thread.start()
    try:
        assert _wait(lambda: sum(trained) >= 3000, 120)
        broker.pause()
        time.sleep(12)  # reads, commits and publishes fail or hang meanwhile
        broker.resume()
        produce(broker.bootstrap, topic, stream.chunks(3000, 3000), partitions=2)
        assert _wait(lambda: sum(trained) >= 6000, 120), sum(trained)
        time.sleep(1)
    finally:
        broker.resume()
        trainer.stop("test done")
        thread.join(180)
    summary = result["summary"]
    assert summary.samples == 6000 and sum(trained) == 6000  # none lost, none twice
    assert sum(summary.positions.values()) == 6000
    reader = KafkaUpdateReader(broker.bootstrap, updates)
    records = reader.read_available()
    reader.close()
    replica = ParameterReplica("m")
    for _, data in records:
        replica.apply(decode_update(data))
    assert differences_from_model(replica, trainer.model, read_parameter_ids(str(tmp_path / "m"))) == []
