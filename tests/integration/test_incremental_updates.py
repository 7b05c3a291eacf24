"""Incremental updates: published while training, they rebuild the trainer's parameters exactly."""
import subprocess
import threading
import time

import pytest

from easyonline.inputs import KafkaInput
from easyonline.updates.param_ids import DENSE_IDS_FILE, TABLE_IDS_FILE, read_parameter_ids
from easyonline.publish.publish_callback import IncrementalPublish
from easyonline.updates.model_diff import differences_from_model
from easyonline.updates.replica import ParameterReplica
from easyonline.updates.replica import replay as _replay
from easyonline.updates.codec import decode_update
from easyonline.updates.readers import DirectoryUpdateReader, KafkaUpdateReader
from easyonline.updates.transport import KAFKA, StreamLocation, open_reader
from easyonline.tools.local_broker import LocalBroker
from easyonline.tools.stream_producer import SyntheticCtrStream, produce
from easyonline.core.callbacks import Callback
from easyonline.jobs.online_train import build_trainer
from easyonline.utils.net import free_port
from tests.conftest import PYTHON, online_config, python_env

FAST = {"data_config.batch_size": 500, "train_config.save_checkpoints_secs": 0, "train_config.log_step_count_secs": 1}


class ShrinkEvery(Callback):
    """Evicts every few batches, so deletes are published too."""

    def __init__(self, batches):
        self.batches, self.seen = batches, 0

    def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
        self.seen += 1
        if self.seen % self.batches == 0:
            trainer.shrink()


def _with_eviction(config, max_size=150):
    for feature in config.feature_configs:
        if feature.feature_type == feature.IdFeature and feature.input_names[0] in ("C1", "C2", "C3"):
            feature.eviction.max_size = max_size


def _file_config(tmp_path, samples, start=0, stream=None, **edits):
    path = tmp_path / f"samples_{start}.csv"
    path.write_bytes(b"\n".join((stream or SyntheticCtrStream()).lines(start, samples)) + b"\n")
    config = online_config(tmp_path / "model", **{**FAST, **edits})
    config.ClearField("kafka_train_input")
    config.file_train_input.paths.append(str(path))
    return config


def assert_replica_equals_trainer(replica, trainer, model_dir):
    """Every table (keys and rows) and every dense parameter, bit for bit."""
    assert differences_from_model(replica, trainer.model, read_parameter_ids(str(model_dir))) == []


def test_published_stream_rebuilds_the_trainer_exactly_with_deletes_and_splitting(broker, topic, tmp_path):
    broker.create_topic(topic, 2)
    produce(broker.bootstrap, topic, SyntheticCtrStream().chunks(0, 12000), partitions=2)
    updates = topic + "_updates"
    location = StreamLocation(KAFKA, broker.bootstrap, updates).with_settings(
        {"security_protocol": "PLAINTEXT", "ssl_check_hostname": False})  # (this broker speaks neither SASL nor SSL)
    reader = open_reader(location)
    assert reader._consumer.config["ssl_check_hostname"] is False  # pylint: disable=protected-access
    reader.close()
    config = online_config(tmp_path / "model", broker.bootstrap, topic, **FAST, **{
        "train_config.incr_save_config": {"sparse_save_steps": 2, "dense_save_steps": 5, "max_message_bytes": 60000,
                                          "kafka": {"server": broker.bootstrap, "topic": updates}}})
    _with_eviction(config)
    published = []

    class Record(Callback):
        def on_publish(self, trainer, result):
            published.append(result)

    trainer = build_trainer(config, online=False, source=KafkaInput(config.kafka_train_input, 500, 200),
                            callbacks=[ShrinkEvery(5), Record()])
    summary = trainer.run()
    assert summary.samples == 12000
    assert sum(len(keys) for keys in trainer.evicted.values()) > 0

    reader = KafkaUpdateReader(broker.bootstrap, updates)
    records = reader.read_available()
    reader.close()
    messages = [decode_update(data) for _, data in records]
    assert [m.header.sequence for m in messages] == list(range(1, len(messages) + 1))
    assert max(len(data) for _, data in records) <= 60000
    assert any(m.header.parts > 1 for m in messages)  # the limit forced splits
    assert sum(len(e.deleted_keys) // 8 for m in messages for e in m.sparse) > 0
    assert published and published[-1].last_sequence == len(messages)
    assert messages[-1].header.global_step == summary.steps
    assert dict(messages[-1].header.positions) == summary.positions
    replica = _replay(records, "model")
    assert_replica_equals_trainer(replica, trainer, tmp_path / "model")
    table = next(t for t in replica.tables.values() if t)
    table.pop(next(iter(table)))  # the comparison itself can fail
    assert differences_from_model(replica, trainer.model, read_parameter_ids(str(tmp_path / "model")))
    for name, evicted in trainer.evicted.items():  # evicted and not trained again since: gone from the copy too
        table_id = read_parameter_ids(str(tmp_path / "model")).tables[name][0]
        live = set(layer_keys(trainer, name))
        assert not [k for k in evicted.tolist() if k not in live and k in replica.tables.get(table_id, {})]


def layer_keys(trainer, table):
    return trainer.model.tables.embeddings[table].params.export()[0].numpy().tolist()


def test_directory_transport_restart_continues_sequence_and_full_syncs_after_a_crash(tmp_path):
    incr_dir = tmp_path / "updates"
    edits = {"train_config.incr_save_config": {"sparse_save_steps": 3, "dense_save_steps": 3,
                                               "fs": {"incr_save_dir": str(incr_dir)}}}
    trainer = build_trainer(_file_config(tmp_path, 4000, **edits), online=False)
    trainer.run()
    first = DirectoryUpdateReader(str(incr_dir)).sequences()
    assert first == list(range(1, len(first) + 1)) and len(first) >= 3
    assert (tmp_path / "model" / DENSE_IDS_FILE).exists() and (tmp_path / "model" / TABLE_IDS_FILE).exists()
    ids_before = read_parameter_ids(str(tmp_path / "model"))

    class Crash(Callback):
        """Dies after publishing a few updates, before the final flush (as a killed trainer would)."""

        def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
            if trainer.step >= 14:
                raise RuntimeError("simulated crash")

    crashing = build_trainer(_file_config(tmp_path, 4000, start=4000, **edits), online=False, callbacks=[Crash()])
    with pytest.raises(RuntimeError, match="simulated crash"):
        crashing.run()
    crashed = DirectoryUpdateReader(str(incr_dir)).sequences()
    assert crashed == list(range(1, len(crashed) + 1)) and len(crashed) > len(first)
    # The restart numbers above what the crashed run reserved and, since the stream and the checkpoint
    # disagree, starts with a full sync (which heals the jump for every reader).
    trainer = build_trainer(_file_config(tmp_path, 3000, start=8000, **edits), online=False)
    trainer.run()
    records = DirectoryUpdateReader(str(incr_dir)).read_available()
    sequences = [s for s, _ in records]
    restart = sequences[len(crashed):]
    assert restart[0] > crashed[-1] + 1 and restart == list(range(restart[0], restart[0] + len(restart)))
    assert decode_update(records[len(crashed)][1]).header.full_sync
    sync = [m for m in (decode_update(data) for _, data in records[len(crashed):]) if m.header.full_sync]
    # streamed: its count is not known in advance (parts 0), the last message ends it
    assert {m.header.parts for m in sync} == {0} and [m.header.full_sync_end for m in sync][-1]
    assert not any(m.header.full_sync_end for m in sync[:-1])
    assert read_parameter_ids(str(tmp_path / "model")) == ids_before  # ids are stable across restarts
    assert_replica_equals_trainer(_replay(records, "model"), trainer, tmp_path / "model")

    out = subprocess.run([PYTHON, "-m", "easyonline.tools.read_updates", "--dir", str(incr_dir)],
                         capture_output=True, text=True, env=python_env(), timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"{len(records)} messages" in out.stdout and "0 gaps" in out.stdout and "FULL_SYNC" in out.stdout


def test_unreachable_update_broker_does_not_stop_training_and_publishing_resumes(tmp_path):
    port = free_port()
    edits = {"train_config.incr_save_config": {"sparse_save_steps": 1, "dense_save_steps": 4, "max_pending_updates": 2,
                                               "kafka": {"server": f"127.0.0.1:{port}", "topic": "updates"}}}
    config = _file_config(tmp_path, 20000, **edits)
    late_broker = LocalBroker(port=port, log_path=str(tmp_path / "late_broker.log"))
    seen = {"error": None, "trained_while_down": 0}

    class StartBrokerLate(Callback):
        """Training runs with the update broker down until the failure is reported, then the broker comes up."""

        def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
            if late_broker.process is not None:
                return
            seen["trained_while_down"] += 1
            if trainer.step == 15:
                publish = next(c for c in trainer.callbacks if isinstance(c, IncrementalPublish))
                deadline = time.time() + 60
                while "pub_error" not in publish.status_fields() and time.time() < deadline:
                    time.sleep(0.2)
                seen["error"] = publish.publisher.error
                late_broker.start()

    try:
        trainer = build_trainer(config, online=False, callbacks=[StartBrokerLate()])
        summary = trainer.run()
        assert summary.samples == 20000
        assert seen["trained_while_down"] == 15
        assert seen["error"] and f"127.0.0.1:{port}" in seen["error"]
        publish = next(c for c in trainer.callbacks if isinstance(c, IncrementalPublish))
        assert publish.publisher.error is None and publish.publisher.unsent_jobs == 0
        reader = KafkaUpdateReader(late_broker.bootstrap, "updates")
        records = reader.read_available()
        reader.close()
        assert_replica_equals_trainer(_replay(records, "model"), trainer, tmp_path / "model")
    finally:
        late_broker.stop()


class PublishTimes(Callback):
    """When the first batch was trained, and every update's creation time and row count."""

    def __init__(self):
        self.first_batch = None
        self.updates = []

    def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
        self.first_batch = self.first_batch or time.time()

    def on_publish(self, trainer, result):
        self.updates.append((result.create_time, result.rows))


def test_a_caught_up_trainer_publishes_changed_rows_at_the_faster_cadence(broker, topic, tmp_path):
    """sparse_save_secs 60 (and dense 60), sparse_save_secs_caught_up 0.2: once the input has no lag, the
    changed rows go out within a second instead of a minute."""
    broker.create_topic(topic, 1)
    produce(broker.bootstrap, topic, SyntheticCtrStream().chunks(0, 2000), partitions=1)
    config = online_config(tmp_path / "model", broker.bootstrap, topic, **FAST)
    incr = config.train_config.incr_save_config
    incr.sparse_save_secs, incr.dense_save_secs, incr.sparse_save_secs_caught_up = 60, 60, 0.2
    incr.kafka.server, incr.kafka.topic = broker.bootstrap, topic + "_updates"
    times = PublishTimes()
    trainer = build_trainer(config, online=True, callbacks=[times])
    thread = threading.Thread(target=trainer.run, daemon=True)
    thread.start()
    try:
        deadline = time.time() + 60
        while not any(rows for _, rows in times.updates) and time.time() < deadline:
            time.sleep(0.05)
        assert times.updates, "nothing was published within 60 s"
        created = next(t for t, rows in times.updates if rows)
        assert trainer.lag == 0
        assert created - times.first_batch < 5, (created - times.first_batch, times.updates)
    finally:
        trainer.stop("test done")
        thread.join(60)


class OneMoreSampleWhenCaughtUp(Callback):
    """Produces one more sample when the trainer first catches up (that batch's tick publishes its rows), so
    that it is trained well within sparse_save_secs_caught_up of that update; records each batch's end and
    each update's creation."""

    def __init__(self, bootstrap, topic):
        self.bootstrap, self.topic = bootstrap, topic
        self.batches, self.updates, self.caught_up_batch = [], [], None

    def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
        self.batches.append(time.time())
        if self.caught_up_batch is None and trainer.lag == 0:
            self.caught_up_batch = len(self.batches) - 1
            produce(self.bootstrap, self.topic, [SyntheticCtrStream().lines(5000, 1)], partitions=1)

    def on_publish(self, trainer, result):
        if result.rows:
            self.updates.append(result.create_time)


def test_a_caught_up_trainer_publishes_on_time_without_waiting_for_another_batch(broker, topic, tmp_path):
    """sparse_save_secs_caught_up 0.3: a batch trained 0.1-0.2 s after an update has its rows published 0.3 s
    after that update, not at the loop's next tick without input (every half second): the loop waits for
    input only until the publish is due (Callback.next_tick_in). Before that, the rows waited up to a whole
    batch (serving_freshness.py's tail: trained -> published p99 0.14-0.20 s with p50 0.016 s)."""
    broker.create_topic(topic, 1)
    produce(broker.bootstrap, topic, SyntheticCtrStream().chunks(0, 200), partitions=1)
    config = online_config(tmp_path / "model", broker.bootstrap, topic, **{
        **FAST, "data_config.batch_timeout_ms": 20})
    incr = config.train_config.incr_save_config
    incr.sparse_save_secs, incr.dense_save_secs, incr.sparse_save_secs_caught_up = 60, 60, 0.3
    incr.kafka.server, incr.kafka.topic = broker.bootstrap, topic + "_updates"
    seen = OneMoreSampleWhenCaughtUp(broker.bootstrap, topic)
    trainer = build_trainer(config, online=True, callbacks=[seen])
    thread = threading.Thread(target=trainer.run, daemon=True)
    thread.start()
    try:
        deadline = time.time() + 60
        while len(seen.updates) < 2 and time.time() < deadline:
            time.sleep(0.05)
        assert seen.caught_up_batch is not None and len(seen.updates) >= 2, (seen.batches, seen.updates)
        caught_up = seen.batches[seen.caught_up_batch]
        first = next(t for t in seen.updates if t >= caught_up)  # made at the tick of the caught-up batch
        later = [t for t in seen.batches if t > caught_up]
        second = next(t for t in seen.updates if t > first)
        assert later, (seen.batches, seen.updates)
        due = max(first + incr.sparse_save_secs_caught_up, later[0])
        # on time: within 0.15 s of when it was due (before: at the next tick, 0.5 s after that batch)
        assert second - due < 0.15, (second - due, later[0] - first)
        assert second >= first + incr.sparse_save_secs_caught_up - 0.01  # and no sooner
    finally:
        trainer.stop("test done")
        thread.join(60)


def test_periodic_full_syncs_end_with_full_sync_end_and_make_a_diverged_replica_equal(tmp_path, caplog):
    """full_sync_secs: the trainer re-sends everything on schedule, each sync's last message flagged
    full_sync_end. A replica holding a row the trainer never had (and which missed the updates before the
    last sync: it starts at its part 0) equals the trainer after applying the last sync."""
    incr_dir = tmp_path / "updates"
    edits = {"train_config.incr_save_config": {"sparse_save_steps": 1, "dense_save_steps": 1,
                                               "full_sync_secs": 0.001, "max_message_bytes": 65536,
                                               "fs": {"incr_save_dir": str(incr_dir)}}}
    with caplog.at_level("WARNING", logger="easyonline.publish.publish_callback"):
        trainer = build_trainer(_file_config(tmp_path, 1500, **edits), online=False)
    # the default model name (the last part of model_dir) is named, with what to set
    assert f"published as model 'model', the last part of model_dir {tmp_path / 'model'}" in caplog.text
    trainer.run()
    reader = DirectoryUpdateReader(str(incr_dir))
    records = []
    while batch := reader.read_available():
        records.extend(batch)
    messages = [decode_update(data) for _, data in records]
    syncs = {m.header.update_id for m in messages if m.header.full_sync}
    ends = [m for m in messages if m.header.full_sync_end]
    assert len(syncs) >= 2 and len(ends) == len(syncs)  # periodic, each ended by its flag
    # streamed table by table (parts 0: the count is not known in advance), several messages each
    assert all(m.header.full_sync and m.header.parts == 0 and m.header.part > 0 for m in ends)
    last_start = max(i for i, m in enumerate(messages) if m.header.full_sync and m.header.part == 0)
    replica = ParameterReplica("model", next_sequence=messages[last_start].header.sequence - 3)
    table_id = next(iter(read_parameter_ids(str(tmp_path / "model")).tables.values()))[0]
    replica.tables[table_id] = {-12345: None}  # a row the trainer does not have
    for message in messages[last_start:]:
        replica.apply(message)  # part 0 of the sync heals the gap before it
    assert replica.removed_by_sync == 1
    assert_replica_equals_trainer(replica, trainer, tmp_path / "model")
