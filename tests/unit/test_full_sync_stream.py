"""A full sync streamed table shard by table shard, in chunks (codec.encode_stream, snapshot.full_sync_pieces,
the publisher's streamed full sync), and the trainer's guard against publishing NaN or infinite values.

Real TFRA tables (two shards in one process, as a checkpoint of two ps is loaded), a real DirectorySink in a
temporary directory, and the reference reader (updates/replica.py) to replay what was published.
"""
import numpy as np
import pytest

from easyonline.config import parse_pipeline_config
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.embedding.dynamic_tables import DynamicTables, local_shards
from easyonline.features import build_feature_specs
from easyonline.embedding.change_tracker import ChangeTracker
from easyonline.protos import pipeline_pb2
from easyonline.publish.nonfinite import NonFiniteGuard
from easyonline.publish.publish_callback import IncrementalPublish
from easyonline.publish.publisher import PublishJob, UpdatePublisher
from easyonline.publish.snapshot import EagerTableRows, full_sync_pieces
from easyonline.updates.codec import (DensePiece, RowsPiece, StreamHeader, decode_update, encode_stream,
                                      sparse_arrays)
from easyonline.updates.directory_sink import DirectorySink
from easyonline.updates.param_ids import ParameterIds
from easyonline.updates.readers import DirectoryUpdateReader
from easyonline.updates.replica import ParameterReplica

tf = ensure_legacy_keras()

CONFIG = """
model_dir: "/tmp/unused"
data_config { input_fields { input_name: "label" input_type: INT32 } input_fields { input_name: "user" }
              input_fields { input_name: "item" } label_fields: "label" }
feature_configs { input_names: "user" embedding_dim: 4 }
feature_configs { input_names: "item" embedding_dim: 2 }
model_config { model_class: "dnn" }
"""
IDS = ParameterIds(dense={"w": 0, "b": 1}, tables={"user": (0, 4), "item": (1, 2)})


def _tables(users=1000, items=300, shards=2):
    """Two tables of ``shards`` shards each, filled with distinct rows."""
    specs = build_feature_specs(parse_pipeline_config(CONFIG))
    with local_shards(shards):
        tables = DynamicTables(specs, name="tables")
    rng = np.random.default_rng(1)
    for name, count, dim in (("user", users, 4), ("item", items, 2)):
        keys = rng.choice(10 ** 9, count, replace=False).astype(np.int64)
        tables.embeddings[name].params.upsert(tf.constant(keys), tf.constant(rng.normal(size=(count, dim)),
                                                                             tf.float32))
    return tables


def _exported(tables, name):
    keys, values = (t.numpy() for t in tables.embeddings[name].params.export())
    order = np.argsort(keys)
    return keys[order], values[order]


class CountingRows(EagerTableRows):
    """Real tables, read through EagerTableRows; records each shard export as it happens."""

    def __init__(self, tables):
        super().__init__(tables)
        self.exports = []

    def export_shards(self, table):
        for keys, values in super().export_shards(table):
            self.exports.append((table, len(keys)))
            yield keys, values


def test_encode_stream_numbers_parts_zero_ends_on_the_last_and_round_trips():
    rows = RowsPiece(3, np.arange(500, dtype=np.int64), np.arange(1000, dtype=np.float32).reshape(500, 2))
    dense = DensePiece(0, np.arange(700, dtype=np.float32).reshape(7, 100))
    head = StreamHeader("m", 9, 1.5, {0: 4}, update_id=2, full_sync=True, stream_id=5)
    messages = [decode_update(data) for data in encode_stream([dense, rows], head, 11, max_bytes=4096)]
    assert len(messages) > 3
    assert [m.header.sequence for m in messages] == list(range(11, 11 + len(messages)))
    assert [m.header.part for m in messages] == list(range(len(messages)))
    assert {m.header.parts for m in messages} == {0} and all(m.header.full_sync for m in messages)
    assert [m.header.full_sync_end for m in messages] == [False] * (len(messages) - 1) + [True]
    replica = ParameterReplica("m")
    for message in messages:
        assert replica.apply(message)
    np.testing.assert_array_equal(replica.dense[0], dense.value)
    keys, values = replica.table_arrays(3)
    np.testing.assert_array_equal(keys, rows.keys)
    np.testing.assert_array_equal(values, rows.values)
    assert list(encode_stream([], head, 1, 4096)) == []
    with pytest.raises(ValueError, match="full syncs only"):
        list(encode_stream([dense], StreamHeader("m", 1, 0.0, {}, 1, full_sync=False), 1, 4096))


def test_the_encoder_holds_at_most_one_chunk_and_one_message_of_rows():
    """Rows handed to the encoder but not yet in a yielded message never exceed a chunk plus a message's worth."""
    chunk, total, dim, max_bytes = 400, 20_000, 4, 8192
    pulled = [0]

    def pieces():
        for start in range(0, total, chunk):
            keys = np.arange(start, min(start + chunk, total), dtype=np.int64)
            pulled[0] += len(keys)
            yield RowsPiece(0, keys, np.ones((len(keys), dim), np.float32))

    per_message = max_bytes // (8 + 4 * dim)
    emitted, held_most = 0, 0
    for data in encode_stream(pieces(), StreamHeader("m", 1, 0.0, {}, 1, True), 1, max_bytes):
        held_most = max(held_most, pulled[0] - emitted)
        emitted += sum(len(sparse_arrays(entry)[1]) for entry in decode_update(data).sparse)
    assert emitted == total
    assert 0 < held_most <= chunk + per_message, held_most


def test_full_sync_pieces_read_one_shard_at_a_time_in_chunks_and_rebuild_the_tables():
    tables = _tables()
    rows = CountingRows(tables)
    counts = {}
    seen_exports = []
    pieces = []
    for piece in full_sync_pieces(rows, IDS, {0: np.ones((2, 2), np.float32), 1: np.zeros(1, np.float32)},
                                  {"user": [np.array([7, 8], np.int64)]}, chunk_rows=64,
                                  guard=NonFiniteGuard("published"), counts=counts):
        seen_exports.append(len(rows.exports))
        pieces.append(piece)
    # lazily: the first rows come after one export, and the shards (2 per table) are read one after another
    first_rows = next(i for i, p in enumerate(pieces) if isinstance(p, RowsPiece))
    assert seen_exports[first_rows] == 1
    assert [name for name, _ in rows.exports] == ["item", "item", "user", "user"]
    assert max(len(p.keys) for p in pieces if isinstance(p, RowsPiece)) <= 64
    assert counts == {"dense": 2, "rows": 1300, "deletes": 2}
    replica = ParameterReplica("m")
    for data in encode_stream(pieces, StreamHeader("m", 1, 0.0, {}, 1, True), 1, 4096):
        replica.apply(decode_update(data))
    for name, (table_id, _) in IDS.tables.items():
        keys, values = replica.table_arrays(table_id)
        want_keys, want_values = _exported(tables, name)
        np.testing.assert_array_equal(keys, want_keys)
        np.testing.assert_array_equal(values, want_values)


def _publisher(tmp_path, tables, sink=None, send_bytes=4096):
    sink = sink or DirectorySink(str(tmp_path / "updates"))
    return UpdatePublisher(sink, "m", IDS, EagerTableRows(tables), max_message_bytes=2048,
                           model_dir=str(tmp_path / "model"), full_sync_send_bytes=send_bytes)


class CountingSink(DirectorySink):
    """A DirectorySink that records how many messages each send carried; ``fail_at``: that send raises once."""

    def __init__(self, directory, fail_at=None):
        super().__init__(directory)
        self.sends, self.fail_at = [], fail_at

    def send(self, messages, key):
        if self.fail_at == len(self.sends):
            self.fail_at = None
            raise ConnectionError("sink down")
        self.sends.append(len(messages))
        super().send(messages, key)


def _replay(directory):
    replica = ParameterReplica("m")
    for _, data in DirectoryUpdateReader(directory).read_available():
        assert replica.apply(decode_update(data))
    return replica


def test_a_streamed_full_sync_is_sent_in_batches_and_replays_to_the_trainer_tables(tmp_path):
    tables = _tables()
    sink = CountingSink(str(tmp_path / "updates"), fail_at=2)  # the third batch fails once: retried, no gap
    publisher = _publisher(tmp_path, tables, sink)
    publisher.start(restored_step=0)
    dense = {0: np.full((2, 2), 0.25, np.float32), 1: np.array([1.5], np.float32)}
    assert publisher.offer(PublishJob(4, 1.0, {0: 40}, dense, {}, {}, full_sync=True))
    assert publisher.offer(PublishJob(5, 2.0, {0: 50}, None, {"item": [_exported(tables, "item")[0][:3]]}, {}))
    assert publisher.close(timeout=60)
    assert len(sink.sends) > 5 and max(sink.sends) < sum(sink.sends) / 3  # many batches, none near the whole
    first, last = publisher.last_acked, publisher.results()
    assert last[0].full_sync and last[0].rows == 1300 and last[0].dense == 2 and not first.full_sync
    messages = [decode_update(data) for _, data in DirectoryUpdateReader(str(tmp_path / "updates")).read_available()]
    sync = [m for m in messages if m.header.full_sync]
    assert [m.header.full_sync_end for m in sync] == [False] * (len(sync) - 1) + [True]
    assert messages[len(sync)].header.sequence == sync[-1].header.sequence + 1  # the next update follows
    replica = _replay(str(tmp_path / "updates"))
    for name, (table_id, _) in IDS.tables.items():
        keys, values = replica.table_arrays(table_id)
        want_keys, want_values = _exported(tables, name)
        np.testing.assert_array_equal(keys, want_keys)
        np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(replica.dense[0], dense[0])
    assert replica.step == 5


def test_nan_and_inf_rows_and_dense_parameters_are_not_published_but_counted(tmp_path, caplog):
    """Without the guard the replica refuses the update (a reader refuses any message with a NaN)."""
    tables = _tables(users=50, items=10, shards=1)
    user_keys, user_rows = _exported(tables, "user")
    bad = user_keys[:3]
    poisoned = user_rows[:3].copy()
    poisoned[0, 1], poisoned[1, 3], poisoned[2, 0] = np.nan, np.inf, -np.inf
    tables.embeddings["user"].params.upsert(tf.constant(bad), tf.constant(poisoned))
    publisher = _publisher(tmp_path, tables)
    publisher.start(restored_step=0)
    dense = {0: np.array([[1, np.nan], [0, 0]], np.float32), 1: np.array([2.0], np.float32)}
    with caplog.at_level("WARNING"):
        publisher.offer(PublishJob(1, 1.0, {}, dense, {"user": [user_keys[:10]]}, {}))
        publisher.offer(PublishJob(2, 2.0, {}, dense, {}, {}, full_sync=True))
        assert publisher.close(timeout=60)
    replica = _replay(str(tmp_path / "updates"))  # applies: nothing non-finite was sent
    keys, _ = replica.table_arrays(0)
    assert set(keys.tolist()) == set(user_keys[3:].tolist())
    assert 0 not in replica.dense and replica.dense[1].tolist() == [2.0]  # w left out whole, b published
    assert publisher.guard.rows == {"user": 6} and publisher.guard.dense == {"w": 2}  # twice each: update, sync
    callback = IncrementalPublish(pipeline_pb2.IncrSaveConfig(), str(tmp_path / "model"), sink=publisher.sink)
    callback.publisher, callback.tracker = publisher, ChangeTracker(build_feature_specs(
        parse_pipeline_config(CONFIG))).subscribe()
    assert callback.status_fields()["pub_nonfinite"] == "8"  # the status line's field
    assert any("not published (user: 3" in r.getMessage() for r in caplog.records)
    assert any("dense parameters with NaN or infinite values not published: w" in r.getMessage()
               for r in caplog.records)


def test_a_cluster_chief_pulls_one_shard_per_session_run():
    """SessionTableRows (the chief's reads on a cluster) through a real TF1 session over a 2-shard table; the
    shards are in this process instead of on two ps (no cluster here), the ops and session runs are the same."""
    from easyonline.distributed.session_tables import SessionTableRows, TableAccess

    graph = tf.Graph()
    with graph.as_default():
        specs = build_feature_specs(parse_pipeline_config(CONFIG))
        with local_shards(2):
            tables = DynamicTables(specs, name="tables")
        access = TableAccess(tables)
        keys = np.arange(1, 401, dtype=np.int64) * 977
        fill = tables.embeddings["user"].params.upsert(tf.constant(keys), tf.constant(
            np.arange(1600, dtype=np.float32).reshape(400, 4)))
        session = tf.compat.v1.Session(graph=graph)
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(fill)
    runs = []

    def run(*args, **kwargs):
        runs.append(args[0])
        return session.run(*args, **kwargs)

    rows = SessionTableRows(run, access)
    shards = rows.export_shards("user")
    first = next(shards)
    assert len(runs) == 1 and 0 < len(first[0]) < 400  # one shard pulled, not the table
    rest = list(shards)
    assert len(runs) == 2 and len(first[0]) + sum(len(k) for k, _ in rest) == 400
    replica = ParameterReplica("m")
    pieces = full_sync_pieces(rows, IDS, {}, {}, 64, NonFiniteGuard("published"), {})
    for data in encode_stream(pieces, StreamHeader("m", 1, 0.0, {}, 1, True), 1, 4096):
        replica.apply(decode_update(data))
    got_keys, got_rows = replica.table_arrays(0)
    np.testing.assert_array_equal(got_keys, keys)
    np.testing.assert_array_equal(got_rows, np.arange(1600, dtype=np.float32).reshape(400, 4))
    session.close()


def test_a_base_is_written_part_by_part_without_nan_rows_and_loads(tmp_path):
    """Before: every part was built first, and a NaN row made the base unloadable (the reader refuses it)."""
    from easyonline.publish.base_delta import load_inference_model, write_base

    tables = _tables(users=2000, items=10, shards=2)
    user_keys, user_rows = _exported(tables, "user")
    poisoned = user_rows[:1].copy()
    poisoned[0, 2] = np.nan
    tables.embeddings["user"].params.upsert(tf.constant(user_keys[:1]), tf.constant(poisoned))
    guard = NonFiniteGuard("saved")
    info = write_base(str(tmp_path), EagerTableRows(tables), IDS, 7, 1.0, {0: 70},
                      {0: np.ones((2, 2), np.float32), 1: np.zeros(1, np.float32)}, {}, "m", guard, part_bytes=8192)
    assert info.manifest["parts"] > 5 and info.manifest["rows"] == 2009 and info.manifest["nonfinite_rows"] == 1
    replica, chain, _ = load_inference_model(str(tmp_path))
    assert [save.name for save in chain] == [info.name] and replica.positions == {0: 70}
    keys, rows = replica.table_arrays(0)
    np.testing.assert_array_equal(keys, user_keys[1:])
    np.testing.assert_array_equal(rows, user_rows[1:])
    np.testing.assert_array_equal(replica.table_arrays(1)[1], _exported(tables, "item")[1])


def test_the_nonfinite_count_is_a_trainer_metric():
    """The status field pub_nonfinite becomes easyonline_trainer_publish_nonfinite_total (absent before)."""
    import threading

    from easyonline.train.prometheus_metrics import PrometheusMetrics

    metrics = PrometheusMetrics.__new__(PrometheusMetrics)  # the collector alone, without its HTTP server
    metrics._lock, metrics._logs = threading.Lock(), {"step": 5, "samples": 50, "samples_per_sec": 10, "rejected": 0,
                                                      "pub_nonfinite": "7"}
    found = {sample.name: sample.value for family in metrics.collect() for sample in family.samples}
    assert found["easyonline_trainer_publish_nonfinite_total"] == 7


TRAINED_CONFIG = """
model_dir: "%s"
file_train_input { paths: "unused" }
data_config { input_fields { input_name: "label" input_type: INT32 } input_fields { input_name: "user" input_type: INT64 }
              input_fields { input_name: "item" input_type: INT64 } label_fields: "label" }
feature_configs { input_names: "user" embedding_dim: 4 }
feature_configs { input_names: "item" embedding_dim: 2 }
model_config { model_class: "dnn" feature_groups { group_name: "all" feature_names: ["user", "item"] } }
"""


def test_a_full_sync_read_while_the_trainer_trains_carries_every_row_trained_before_it(tmp_path):
    """The trainer's own reader (its engine's ``table_rows``) and a training thread, as the publisher's
    thread reads beside the training loop. Every batch brings 2,000 new users; a full sync read while later
    batches train must carry every user of the batches trained before it began. Before: TFRA's export,
    taken while a step inserted new keys, lacked some of them (4 of 118 reads when this
    test was written); a reader applying such a sync removed those rows. The reads now wait for the step between."""
    import threading

    from easyonline.jobs.online_train import build_trainer

    trainer = build_trainer(parse_pipeline_config(TRAINED_CONFIG % tmp_path), online=False)
    trainer.train_batch({"user": tf.constant([-1], tf.int64), "item": tf.constant([-1], tf.int64)},
                        np.zeros(1, np.float32))  # traces the step (padding ids: no row)
    rows = trainer.table_rows()
    trained, lock, failed = [], threading.Lock(), []
    batches, size = 40, 2000  # 80,000 users in all

    def train():
        try:
            rng = np.random.default_rng(3)
            for b in range(batches):
                users = np.arange(b * size, (b + 1) * size) * 7919 + 1
                features = {"user": tf.constant(users, tf.int64),
                            "item": tf.constant(rng.integers(0, 1 << 40, size), tf.int64)}
                trainer.train_batch(features, (users % 2).astype(np.float32))
                with lock:
                    trained.append(users)
        except BaseException as e:  # pylint: disable=broad-except  (reported by the test thread)
            failed.append(e)

    thread = threading.Thread(target=train, daemon=True)
    thread.start()
    reads, incomplete = 0, []
    while thread.is_alive():
        with lock:
            before = np.concatenate(trained) if trained else np.zeros(0, np.int64)
        carried = [p.keys for p in full_sync_pieces(rows, IDS, {}, {}, 4096, NonFiniteGuard("published"), {})
                   if isinstance(p, RowsPiece) and p.table_id == IDS.tables["user"][0]]
        missing = np.setdiff1d(before, np.concatenate(carried) if carried else np.zeros(0, np.int64))
        reads += 1
        if len(missing):
            incomplete.append(f"read {reads}: {len(missing)} of the {len(before)} users trained before it")
    thread.join()
    assert not failed, failed
    assert reads >= 3 and len(np.concatenate(trained)) == batches * size
    assert incomplete == [], incomplete
