"""UpdatePublisher on its own: a job becomes numbered messages that rebuild the table, retries leave no gap,
and a restart continues the numbering from model_dir's UPDATE_STREAM (and asks for a full sync when the stream
may differ from the restored model).

Real TFRA tables and a real DirectorySink in a temporary directory; the flaky sink is a DirectorySink whose
first sends raise, the way a broker outage looks to the publisher.
"""
import time

import numpy as np
import pytest

from easyonline.config import parse_pipeline_config
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.embedding.dynamic_tables import DynamicTables
from easyonline.features import build_feature_specs
from easyonline.publish.publisher import PublishJob, UpdatePublisher
from easyonline.publish.snapshot import EagerTableRows
from easyonline.publish.stream_position import RESERVE, STATE_FILE
from easyonline.updates.codec import decode_update
from easyonline.updates.directory_sink import DirectorySink
from easyonline.updates.param_ids import ParameterIds
from easyonline.updates.readers import DirectoryUpdateReader
from easyonline.updates.replica import ParameterReplica, UpdateGapError

tf = ensure_legacy_keras()

CONFIG = """
model_dir: "/tmp/unused"
data_config { input_fields { input_name: "label" input_type: INT32 } input_fields { input_name: "user" }
              label_fields: "label" }
feature_configs { input_names: "user" embedding_dim: 3 }
model_config { model_class: "dnn" }
"""


class FlakySink(DirectorySink):
    """Fails the first ``failures`` sends, then writes like a DirectorySink."""

    def __init__(self, directory: str, failures: int):
        super().__init__(directory)
        self.failures = failures

    def send(self, messages, key):
        if self.failures:
            self.failures -= 1
            raise ConnectionError("sink down")
        super().send(messages, key)


def _tables():
    specs = build_feature_specs(parse_pipeline_config(CONFIG))
    tables = DynamicTables(specs, name="tables")
    tables.embeddings["user"].params.upsert(tf.constant([1, 2, 5], tf.int64),
                                            tf.constant(np.arange(9, dtype=np.float32).reshape(3, 3)))
    return tables, ParameterIds(dense={"bias": 0}, tables={"user": (0, 3)})


def _job(step, trained, deleted=(), dense=None, full_sync=False):
    return PublishJob(step, 1.0, {0: step * 10}, dense, {"user": [np.array(trained, np.int64)]},
                      {"user": [np.array(deleted, np.int64)]} if len(deleted) else {}, full_sync)


def _publisher(tmp_path, tables, ids, sink=None):
    """Publishes to ``tmp_path/updates``, keeps its stream position in ``tmp_path/model``."""
    sink = sink or DirectorySink(str(tmp_path / "updates"))
    return UpdatePublisher(sink, "m", ids, EagerTableRows(tables), max_message_bytes=4096,
                           model_dir=str(tmp_path / "model"))


def _replay(directory):
    replica = ParameterReplica("m")
    for _, data in DirectoryUpdateReader(directory).read_available():
        assert replica.apply(decode_update(data))
    return replica


def test_a_job_becomes_messages_that_rebuild_the_rows(tmp_path):
    tables, ids = _tables()
    publisher = _publisher(tmp_path, tables, ids)
    publisher.start(restored_step=0)
    # keys 1 and 2 trained (2 twice, -1 is padding), 7 deleted and not in the table, 9 trained but never admitted
    assert publisher.offer(_job(3, [1, 2, 2, -1, 9], deleted=[7], dense={0: np.array([0.5], np.float32)}))
    assert publisher.close(timeout=30)
    replica = _replay(str(tmp_path / "updates"))
    keys, rows = replica.table_arrays(0)
    assert keys.tolist() == [1, 2]  # 9 has no row, -1 is padding, 7 is a delete
    np.testing.assert_array_equal(rows, [[0, 1, 2], [3, 4, 5]])
    np.testing.assert_array_equal(replica.dense[0], [0.5])
    assert replica.step == 3 and replica.positions == {0: 30}
    assert publisher.last_acked.rows == 2 and publisher.last_acked.deletes == 1


def test_a_failing_sink_is_retried_without_a_gap(tmp_path):
    tables, ids = _tables()
    sink = FlakySink(str(tmp_path / "updates"), failures=2)
    publisher = _publisher(tmp_path, tables, ids, sink)
    publisher.start(restored_step=0)
    publisher.offer(_job(1, [1]))
    publisher.offer(_job(2, [5]))
    assert publisher.close(timeout=60)
    assert sink.failures == 0 and publisher.error is None  # it failed, then recovered
    assert DirectoryUpdateReader(str(tmp_path / "updates")).sequences() == [1, 2]
    assert _replay(str(tmp_path / "updates")).table_arrays(0)[0].tolist() == [1, 5]


def test_a_restart_continues_the_sequence_and_resyncs_when_out_of_step(tmp_path):
    tables, ids = _tables()
    first = _publisher(tmp_path, tables, ids)
    first.start(restored_step=0)
    first.offer(_job(4, [1]))
    assert first.close(timeout=30)
    in_step = _publisher(tmp_path, tables, ids)
    in_step.start(restored_step=4)  # the stream ends at step 4 too: no full sync
    in_step.offer(_job(5, [2]))
    assert in_step.close(timeout=30)
    assert not in_step.take_full_sync() and in_step.last_acked.first_sequence == 2
    behind = _publisher(tmp_path, tables, ids)
    behind.start(restored_step=3)  # a crash lost steps 4-5 of the model: every row must be sent again
    behind.offer(_job(4, [], full_sync=True))
    assert behind.close(timeout=30)
    assert behind.take_full_sync()
    assert behind.last_acked.first_sequence == 3 and behind.last_acked.full_sync and behind.last_acked.rows == 3
    assert _replay(str(tmp_path / "updates")).next_sequence == 4


def test_a_restart_continues_its_stream_from_model_dir_after_retention_emptied_it_and_after_a_crash(tmp_path):
    """Retention removed every message: the restart continues the same stream and numbering (no scan of the
    sink could have found them). After a crash it numbers above the crashed run's reservation with a full sync,
    which heals the jump for a reader. Without the file (a restored backup), a new stream that readers switch to."""
    tables, ids = _tables()
    updates = tmp_path / "updates"
    first = _publisher(tmp_path, tables, ids)
    first.start(restored_step=0)
    for step in (1, 2, 3):
        first.offer(_job(step, [1]))
    assert first.close(timeout=30)
    reader = _replay(str(updates))
    assert (reader.next_sequence, reader.cursor.stream_id) == (4, first.stream_id)

    for path in updates.iterdir():  # retention: the stream's messages are gone
        path.unlink()
    again = _publisher(tmp_path, tables, ids)
    again.start(restored_step=3)
    again.offer(_job(4, [2]))
    deadline = time.time() + 30
    while again.last_acked is None:
        assert time.time() < deadline
        time.sleep(0.05)
    state_while_running = (tmp_path / "model" / STATE_FILE).read_text()
    assert again.close(timeout=30)
    assert not again.take_full_sync() and again.stream_id == first.stream_id
    (message,) = [decode_update(data) for _, data in DirectoryUpdateReader(str(updates)).read_available()]
    assert (message.header.sequence, message.header.stream_id) == (4, first.stream_id)
    assert reader.apply(message)  # the reader at 4 goes on

    (tmp_path / "model" / STATE_FILE).write_text(state_while_running)  # as if killed before its clean stop
    for path in updates.iterdir():
        path.unlink()
    tables.embeddings["user"].params.upsert(tf.constant([1], tf.int64), tf.constant([[7.0, 7.0, 7.0]]))
    crashed = _publisher(tmp_path, tables, ids)
    crashed.start(restored_step=4)
    assert crashed.take_full_sync()  # known at start: the first update is the full sync
    crashed.offer(_job(5, [], full_sync=True))
    crashed.offer(_job(6, [2]))
    assert crashed.close(timeout=30) and crashed.stream_id == first.stream_id
    messages = [decode_update(data) for _, data in DirectoryUpdateReader(str(updates)).read_available()]
    assert [(m.header.sequence, m.header.full_sync) for m in messages] == [(4 + RESERVE + 1, True),
                                                                           (4 + RESERVE + 2, False)]
    with pytest.raises(UpdateGapError, match="missing"):  # the jump is a gap for anything but a full sync
        ParameterReplica("m", next_sequence=5, stream_id=first.stream_id).apply(messages[1])
    assert reader.apply(messages[0]) and reader.apply(messages[1]) and reader.next_sequence == 4 + RESERVE + 3
    np.testing.assert_array_equal(reader.tables[0][1], [7, 7, 7])  # the full sync brought the current rows

    (tmp_path / "model" / STATE_FILE).unlink()
    for path in updates.iterdir():
        path.unlink()
    tables.embeddings["user"].params.upsert(tf.constant([1], tf.int64), tf.constant([[8.0, 8.0, 8.0]]))
    fresh = _publisher(tmp_path, tables, ids)
    fresh.start(restored_step=5)
    assert fresh.take_full_sync()  # the restored model is ahead of a new, empty stream: every row once more
    fresh.offer(_job(6, [], full_sync=True))
    fresh.offer(_job(7, [2]))
    assert fresh.close(timeout=30)
    assert fresh.stream_id not in (0, first.stream_id)
    messages = [decode_update(data) for _, data in DirectoryUpdateReader(str(updates)).read_available()]
    assert [(m.header.sequence, m.header.full_sync, m.header.stream_id) for m in messages] == [
        (1, True, fresh.stream_id), (2, False, fresh.stream_id)]
    with pytest.raises(UpdateGapError, match="other_stream"):  # 2 < the reader's next, but not a duplicate
        ParameterReplica("m", next_sequence=10, stream_id=first.stream_id).apply(messages[1])
    assert reader.apply(messages[0]) and reader.cursor.stream_id == fresh.stream_id
    np.testing.assert_array_equal(reader.tables[0][1], [8, 8, 8])


def test_a_directory_sink_refuses_to_overwrite_another_publishers_message(tmp_path):
    tables, ids = _tables()
    first = _publisher(tmp_path, tables, ids)
    first.start(restored_step=0)
    first.offer(_job(1, [1]))
    assert first.close(timeout=30)
    sink = DirectorySink(str(tmp_path / "updates"))
    (name,) = [p.name for p in (tmp_path / "updates").glob("*.pb")]
    mine = (tmp_path / "updates" / name).read_bytes()
    other = decode_update(mine)
    other.header.global_step += 1  # the same stream and number, other contents
    with pytest.raises(ValueError, match="another publisher writes to"):
        sink.send([(1, other.SerializeToString())], b"m")
    sink.send([(1, mine)], b"m")  # a retry: same bytes


class TimingOutSink(DirectorySink):
    """Every send fails as kafka-python's producer fails when no broker answers."""

    def send(self, messages, key):
        from kafka.errors import KafkaTimeoutError  # pylint: disable=g-import-not-at-top
        raise KafkaTimeoutError("Failed to update metadata after 60.0 secs.")


def test_a_kafka_error_is_named_once_in_the_publishers_error(tmp_path):
    """kafka-python's errors start their text with their class name: the trainer's error line and pub_error
    read ``failed: KafkaTimeoutError: KafkaTimeoutError: Failed to update metadata``."""
    tables, ids = _tables()
    publisher = _publisher(tmp_path, tables, ids, TimingOutSink(str(tmp_path / "updates")))
    publisher.start(restored_step=0)
    publisher.offer(_job(1, [1]))
    deadline = time.time() + 30
    while publisher.error is None and time.time() < deadline:
        time.sleep(0.05)
    assert not publisher.close(timeout=1)
    assert publisher.error == (f"sending to directory {tmp_path / 'updates'} failed: KafkaTimeoutError: Failed to "
                               "update metadata after 60.0 secs."), publisher.error
