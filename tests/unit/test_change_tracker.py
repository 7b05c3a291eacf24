"""ChangeTracker and its ChangeLogs (embedding/change_tracker.py): which keys changed, per table, per subscriber."""
import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()

import numpy as np
import pytest

from easyonline.config import parse_pipeline_config
from easyonline.embedding import change_tracker
from easyonline.embedding.change_tracker import ChangeTracker, split_changes, unique_keys
from easyonline.features.feature_spec import build_feature_specs

# user has its own table; item and seen_item share the table "item"; tags (a TagFeature) has its own.
_CONFIG = """
model_dir: "/tmp/unused"
file_train_input { paths: "unused.csv" }
data_config {
  input_fields { input_name: "label" input_type: INT32 }
  input_fields { input_name: "user" input_type: INT64 }
  input_fields { input_name: "item" input_type: INT64 }
  input_fields { input_name: "seen_item" input_type: INT64 }
  input_fields { input_name: "tags" input_type: STRING }
  label_fields: "label"
  separator: ","
}
feature_configs { input_names: "user" embedding_dim: 2 }
feature_configs { input_names: "item" embedding_dim: 2 }
feature_configs { input_names: "seen_item" embedding_dim: 2 embedding_name: "item" }
feature_configs { input_names: "tags" feature_type: TagFeature embedding_dim: 2 }
model_config { model_class: "dnn" }
"""


@pytest.fixture(scope="module")
def specs():
    return build_feature_specs(parse_pipeline_config(_CONFIG))


def _batch(user, item, seen_item, tags):
    return {"user": tf.constant(user, tf.int64), "item": tf.constant(item, tf.int64),
            "seen_item": tf.constant(seen_item, tf.int64), "tags": tf.ragged.constant(tags, dtype=tf.int64)}


def _lists(logged):
    """{table: [list of ids per recorded array]} for comparing drained logs."""
    return {table: [a.tolist() for a in arrays] for table, arrays in logged.items()}


def test_specs_of_the_config(specs):
    assert [(f.name, f.table, f.multi_value) for f in specs.id_features] == [
        ("user", "user", False), ("item", "item", False), ("seen_item", "item", False), ("tags", "tags", True)]
    assert sorted(specs.tables) == ["item", "tags", "user"]
    assert [f.name for f in specs.features_of_table("item")] == ["item", "seen_item"]


def test_a_batch_is_recorded_per_table_with_shared_tables_getting_one_array_per_feature(specs):
    tracker = ChangeTracker(specs)
    log = tracker.subscribe()
    tracker.record_batch(_batch([1, 2], [10, 11], [11, -1], [[5, 6], []]))
    # ids: user 2 + item 2 + seen_item 2 + tags 2 (the ragged tensor's flat values) = 8
    assert log.pending_ids == 8
    trained, deleted = log.drain()
    assert _lists(trained) == {"user": [[1, 2]], "item": [[10, 11], [11, -1]], "tags": [[5, 6]]}
    assert deleted == {} and log.pending_ids == 0


def test_two_subscribers_each_see_everything_once_on_their_own_schedule(specs):
    tracker = ChangeTracker(specs)
    fast, slow = tracker.subscribe(), tracker.subscribe()
    tracker.record_batch(_batch([1], [10], [20], [[5]]))
    tracker.record_deleted({"item": np.array([30, 31])})
    first = fast.drain()                                  # fast drains after batch 1
    tracker.record_batch(_batch([2], [11], [21], [[]]))   # batch 2: the tag row is empty
    tracker.record_deleted({"user": [7]})
    second = fast.drain()                                 # and after batch 2
    assert fast.drain() == ({}, {})                       # nothing twice
    everything = slow.drain()                             # slow drains once, after both

    assert _lists(first[0]) == {"user": [[1]], "item": [[10], [20]], "tags": [[5]]}
    assert _lists(first[1]) == {"item": [[30, 31]]}
    assert _lists(second[0]) == {"user": [[2]], "item": [[11], [21]], "tags": [[]]}
    assert _lists(second[1]) == {"user": [[7]]}
    assert _lists(everything[0]) == {"user": [[1], [2]], "item": [[10], [20], [11], [21]], "tags": [[5], []]}
    assert _lists(everything[1]) == {"item": [[30, 31]], "user": [[7]]}
    assert everything[1]["user"][0].dtype == np.int64  # deletes given as a list become int64
    assert slow.drain() == ({}, {})


def test_pending_ids_counts_trained_and_deleted_ids_with_repeats(specs):
    tracker = ChangeTracker(specs)
    log = tracker.subscribe()
    tracker.record_batch(_batch([1, 1, 1], [10, 10, 10], [10, 10, 10], [[5, 5], [5], []]))
    # 3 + 3 + 3 + 3 (tags: 2 + 1 + 0): every occurrence counts, repeats included
    assert log.pending_ids == 12
    tracker.record_deleted({"user": np.array([1, 1])})
    assert log.pending_ids == 14  # 12 + 2 deleted keys
    log.drain()
    assert log.pending_ids == 0


def test_an_undrained_log_merges_repeats_so_its_memory_follows_the_distinct_keys(specs, monkeypatch):
    """While nobody drains (the sink is down), a log keeps distinct keys, not every batch's arrays."""
    monkeypatch.setattr(change_tracker, "MERGE_AT_IDS", 100)
    tracker = ChangeTracker(specs)
    log = tracker.subscribe()
    rng = np.random.default_rng(0)
    every = {"user": set(), "item": set(), "tags": set()}
    for _ in range(500):  # 500 batches of 40 ids over 20 distinct keys per table
        user, item, seen = (rng.integers(0, 20, 10) for _ in range(3))
        tags = [list(rng.integers(0, 20, 1)) for _ in range(10)]
        tracker.record_batch(_batch(user, item, seen, tags))
        every["user"] |= set(user.tolist())
        every["item"] |= set(item.tolist()) | set(seen.tolist())
        every["tags"] |= {t[0] for t in tags}
        assert log.pending_ids <= 2 * 60 + 100  # never more than twice the distinct keys, or one merge's worth
    tracker.record_deleted({"user": np.array([3, 3, 99])})
    assert log.merges > 50
    trained, deleted = log.drain()
    # nothing lost: every key trained is there once, and the deletes too
    assert {t: sorted(unique_keys(a).tolist()) for t, a in trained.items()} == {t: sorted(k) for t, k in every.items()}
    assert sum(len(a) for arrays in trained.values() for a in arrays) <= 60 + 160  # merged keys + batches since
    assert sorted(unique_keys(deleted["user"]).tolist()) == [3, 99]
    assert log.drain() == ({}, {}) and log.pending_ids == 0


def test_recording_without_a_subscriber_keeps_nothing(specs):
    tracker = ChangeTracker(specs)
    tracker.record_batch(_batch([1], [10], [20], [[5]]))
    tracker.record_deleted({"user": np.array([1])})
    log = tracker.subscribe()  # a late subscriber sees only what comes after it
    assert log.pending_ids == 0 and log.drain() == ({}, {})
    tracker.record_batch(_batch([2], [11], [21], [[6]]))
    assert log.pending_ids == 4


def test_unique_keys_dedups_sorts_and_drops_padding():
    # concatenated: 3, -1, 3, 5, 5, 0, -7 -> unique 0, 3, 5 (negative ids are padding, never rows)
    keys = unique_keys([np.array([3, -1, 3, 5]), np.array([5, 0, -7], np.int32)])
    assert keys.tolist() == [0, 3, 5] and keys.dtype == np.int64
    assert unique_keys([]).tolist() == [] and unique_keys([]).dtype == np.int64
    assert unique_keys([np.array([-1, -1])]).tolist() == []


def test_split_changes_sends_rows_that_exist_and_deletes_only_what_was_deleted():
    keys = np.array([1, 2, 3, 4], np.int64)
    values = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]], np.float32)
    exists = np.array([True, False, True, False])
    # 1 and 3 are in the table: rows with their current values. 2 and 4 are not: 2 was deleted (a delete),
    # 4 was trained but never admitted (not sent at all).
    row_keys, row_values, delete_keys = split_changes(keys, np.array([2, 9], np.int64), values, exists)
    assert row_keys.tolist() == [1, 3]
    assert row_values.tolist() == [[1.0, 1.0], [3.0, 3.0]]
    assert delete_keys.tolist() == [2]


def test_split_changes_a_deleted_key_that_is_back_is_a_row():
    # key 5 was deleted and then trained again: it exists, so it is sent as a row, not a delete.
    row_keys, row_values, delete_keys = split_changes(np.array([5], np.int64), np.array([5], np.int64),
                                                      np.array([[0.5]], np.float32), np.array([True]))
    assert (row_keys.tolist(), row_values.tolist(), delete_keys.tolist()) == ([5], [[0.5]], [])
