"""Retention on the update topic behind a restarted server, on Apache Kafka (issue 50).

Real: Apache Kafka (the session's broker, tests/conftest.py), the trainer run in-process as ``online_train``
builds it (reading the training topic with kafka-python, publishing with its KafkaSink), serve's
UpdateFollower reading the update topic with its KafkaUpdateReader, records deleted with Kafka's
DeleteRecords (what retention does), and serve's own readiness and metrics code (``ServingState``, what
``/ready`` and ``/metrics`` answer). Stand-in: the follower applies to a parameter copy (test_kafka_broker_failures's ReplicaTarget,
applying what the follower hands it as LoadedExport does) instead of a loaded export; its restart keeps that
copy and starts from the offset and sequence after the last message it applied, as a server restarted from an
export made there.

Proved, with exact counts: a clean trainer restart continues the stream without a full sync, so a server
restarted from a position whose following messages retention deleted cannot be told by the stream itself;
the reader sees that its start offset is below the partition's log start and says so (reason ``retention``
naming both offsets, counted once, the behind log line, ``/ready`` 503, ``easyonline_serving_behind 1``); it
still applies what follows (the first message after the hole is refused as a gap and moved past). It differs
from the trainer until the trainer's next scheduled full sync (``full_sync_secs``), applied whole, after which
it equals the trainer bit for bit, is ready and no longer behind.
"""
import logging
import time

import pytest

from easyonline.jobs.online_train import build_trainer
from easyonline.serve.http_api import ServingState
from easyonline.serve.update_follower import UpdateFollower
from easyonline.updates.codec import decode_update
from easyonline.updates.apply_rules import StreamCursor
from easyonline.updates.readers import KafkaUpdateReader
from tests.conftest import leaves_no_kafka_client, online_config
from tests.integration.test_incremental_updates import assert_replica_equals_trainer
from tests.integration.test_kafka_broker_failures import MODEL, ReplicaTarget
from tests.integration.test_retention_and_recreated_topics import FAST, RunningTrainer, _produce

BROKER = "apache_kafka"  # (tests/conftest.py)

DELETED_PAST_POSITION = 2  # update messages past the stopped server's position that retention deletes


class ServerCopy(ReplicaTarget):
    """A parameter copy that, like serve's LoadedExport, applies what the follower hands it: the order rules
    (duplicates, gaps, streams) are the follower's alone (ParameterReplica would refuse a gap a second time)."""

    def apply(self, message):
        header = message.header
        self.replica.cursor = StreamCursor(MODEL, header.sequence, header.stream_id)
        return super().apply(message)


def _config(broker, topic, updates, model_dir, full_sync_secs):
    """Batches of 100; an update after every step (dense and changed rows), so the message counts are exact."""
    return online_config(model_dir, broker.bootstrap, topic, **FAST, **{
        "train_config.incr_save_config": {"sparse_save_steps": 1, "dense_save_steps": 1,
                                          "full_sync_secs": full_sync_secs,
                                          "kafka": {"server": broker.bootstrap, "topic": updates}}})


def _stream(broker, updates):
    """(offset, header) of every message left on the update topic."""
    reader = KafkaUpdateReader(broker.bootstrap, updates)
    try:
        return [(offset, decode_update(data).header) for offset, data in reader.read_available(30)]
    finally:
        reader.close()


def _wait(condition, what, timeout=60.0):
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.05)


def _caught_up(follower, last_sequence):
    return lambda: follower.last_sequence == last_sequence and follower.lag_messages == 0


def test_a_server_restarted_past_retention_is_behind_until_the_trainers_next_full_sync(broker, topic, tmp_path,
                                                                                       caplog):
    caplog.set_level(logging.INFO, logger="easyonline.serve.update_follower")
    started = time.time()
    updates = topic + "_updates"
    broker.create_topic(topic, 1)
    broker.create_topic(updates, 1)
    model_dir = tmp_path / MODEL

    # 1. The trainer trains 300 samples (3 steps) and stops: an update after each step and its final one.
    _produce(broker, topic, 0, 300)
    config = _config(broker, topic, updates, model_dir, 0)
    first = build_trainer(config, online=False)
    assert first.run().samples == 300
    run1 = _stream(broker, updates)
    assert [h.sequence for _, h in run1] == [1, 2, 3, 4] and [o for o, _ in run1] == [0, 1, 2, 3]
    assert not any(h.full_sync for _, h in run1)

    # A server follows it to its end and stops: its position is offset 4, sequence 5.
    target = ServerCopy(broker.bootstrap, updates, config)
    with leaves_no_kafka_client():  # a stopped follower closed its consumer
        follower = UpdateFollower(target).start()
        try:
            _wait(_caught_up(follower, 4), "the server applying sequences 1-4")
        finally:
            follower.stop()
    assert (follower.applied, follower.refused, follower.behind) == (4, {}, None)
    assert_replica_equals_trainer(target.replica, first, model_dir)
    position, next_sequence, stream_id = 4, follower.next_sequence, follower.cursor.stream_id
    assert next_sequence == 5 and stream_id == run1[0][1].stream_id

    # 2. 300 more samples: the trainer restarts (a clean stop before: it continues the stream, no full sync).
    _produce(broker, topic, 300, 300)
    second = build_trainer(config, online=False)
    assert second.run().samples == 300
    run2 = _stream(broker, updates)[4:]
    assert [h.sequence for _, h in run2] == [5, 6, 7, 8] and [o for o, _ in run2] == [4, 5, 6, 7]
    assert not any(h.full_sync for _, h in run2) and {h.stream_id for _, h in run2} == {stream_id}

    # 3. Retention: DeleteRecords up to offset 6 removes the 4 applied messages and 2 past the position.
    broker.delete_records(updates, {0: position + DELETED_PAST_POSITION})
    left = _stream(broker, updates)
    assert [(o, h.sequence) for o, h in left] == [(6, 7), (7, 8)]

    # 4. The server restarts from its position (offset 4, sequence 5): behind, reason retention.
    target.update_info.update(offset=position, sequence=next_sequence, stream_id=stream_id)
    restarted = UpdateFollower(target).start()
    try:
        _wait(_caught_up(restarted, 8), "the restarted server reading to sequence 8")
        why = f"retention: offset 4 of {updates} is gone (retention): the partition begins at 6"
        assert restarted.behind == why and not restarted.ready
        assert f"serving is behind the trainer ({why}) until the next full sync" in caplog.text
        # counted once as retention; sequence 7 (after the hole) is refused as a gap and moved past; 8 applied
        assert restarted.refused == {"retention": 1, "gap": 1}
        assert (restarted.applied, restarted.skipped, restarted.last_sequence) == (1, 0, 8)
        serving = ServingState(target, restarted, MODEL, 1 << 20)
        status, body = serving.readiness()
        assert status == 503 and body["ready"] is False and body["behind"] == why
        metrics = serving.metrics()
        assert "easyonline_serving_behind 1\n" in metrics
        assert 'easyonline_serving_refused_updates_total{reason="retention"} 1\n' in metrics
        # the rows trained in steps 4-6 went out only in the deleted messages and the refused one
        with pytest.raises(AssertionError):
            assert_replica_equals_trainer(target.replica, second, model_dir)

        # 5. The trainer goes on (200 more samples) with full_sync_secs 2: its next full sync heals the server.
        _produce(broker, topic, 600, 200)
        running = RunningTrainer(_config(broker, topic, updates, model_dir, 2.0))
        running.wait_for(lambda t: t.samples_trained() == 800, "800 samples trained")
        _wait(lambda: restarted.behind is None, "the server applying a full sync whole", timeout=30)
        summary = running.stop().summary
        assert summary.samples == 200
        stream = _stream(broker, updates)
        last = stream[-1][1].sequence
        _wait(_caught_up(restarted, last), f"the server applying the trainer's last update, sequence {last}")
    finally:
        restarted.stop()
    run3 = [h for _, h in stream if h.sequence > 8]
    assert [h.sequence for h in run3] == list(range(9, last + 1)) and {h.stream_id for h in run3} == {stream_id}
    syncs = sum(1 for h in run3 if h.full_sync_end)
    assert syncs >= 1 and restarted.full_sync.completed == syncs
    assert restarted.behind is None and restarted.ready and restarted.refused == {"retention": 1, "gap": 1}
    assert restarted.applied == 1 + len(run3) and restarted.skipped == 0
    assert f"serving equals the trainer again after a full sync (was behind: {why}" in caplog.text
    status, body = serving.readiness()
    assert status == 200 and body == {**body, "ready": True, "behind": None}
    assert "easyonline_serving_behind 0\n" in serving.metrics()
    assert_replica_equals_trainer(target.replica, running.trainer, model_dir)
    print(f"run 3: sequences 9-{last} (sequence, step, full sync): "
          f"{[(h.sequence, h.global_step, h.full_sync) for h in run3]}, {syncs} full sync(s) applied whole; "
          f"test {time.time() - started:.1f} s")
