"""The rules every reader applies update messages by (apply_rules.py), and ParameterReplica following them."""
import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before anything loads TensorFlow)

import numpy as np
import pytest

from easyonline.protos import update_pb2
from easyonline.updates.apply_rules import (DUPLICATE, GAP, IMPLAUSIBLE, MAX_FULL_SYNC_JUMP, NEXT, OTHER_MODEL,
                                            OTHER_STREAM, DenseWrite, StreamCursor, message_changes, sequence_verdict)
from easyonline.updates.codec import MalformedUpdateError, UpdateSnapshot, decode_update, encode_update
from easyonline.updates.replica import ParameterReplica, UpdateGapError


def _header(sequence, model_name="m", full_sync=False, part=0, parts=1, stream_id=0, full_sync_end=False,
            update_id=0):
    return update_pb2.UpdateHeader(model_name=model_name, format_version=1, sequence=sequence,
                                   full_sync=full_sync, part=part, parts=parts, stream_id=stream_id,
                                   full_sync_end=full_sync_end, update_id=update_id)


def _f32(values):
    return np.asarray(values, np.float32).tobytes()


def _i64(values):
    return np.asarray(values, np.int64).tobytes()


def _message(sequence, dense=(), sparse=(), step=0, **header):
    """An UpdateMessage from (id, shape, offset, values) dense and (table, dim, keys, rows, deleted) sparse tuples."""
    message = update_pb2.UpdateMessage()
    message.header.CopyFrom(_header(sequence, **header))
    message.header.global_step = step
    for param_id, shape, offset, values in dense:
        message.dense.add(id=param_id, shape=list(shape), offset=offset, values=_f32(values))
    for table_id, dim, keys, rows, deleted in sparse:
        message.sparse.add(table_id=table_id, dim=dim, keys=_i64(keys), values=_f32(rows), deleted_keys=_i64(deleted))
    return message


# sequence_verdict ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("header, model_name, expected", [
    (_header(5, model_name="other"), "m", OTHER_MODEL),  # another stream on a shared topic
    (_header(5, model_name="other"), None, NEXT),        # no model name to follow: every model's messages count
    (_header(5, model_name="other"), "", NEXT),
    (_header(4), "m", DUPLICATE),                        # 4 < 5: already reflected
    (_header(1), "m", DUPLICATE),
    (_header(5), "m", NEXT),                             # 5 == 5
    (_header(6), "m", GAP),                              # 6 > 5: message 5 was lost
    (_header(9, full_sync=True, part=0, parts=2), "m", NEXT),  # part 0 of a full sync heals the gap 5..8
    (_header(9, full_sync=True, part=1, parts=2), "m", GAP),   # part 1 alone cannot: part 0's rows are missing
    (_header(4, full_sync=True, part=0, parts=2), "m", DUPLICATE),  # an old full sync is still a duplicate
    (_header(5, full_sync=True, part=1, parts=2), "m", NEXT),  # in order, any part applies
])
def test_sequence_verdict(header, model_name, expected):
    assert sequence_verdict(header, model_name, next_sequence=5) == expected


@pytest.mark.parametrize("header, expected", [
    (_header(5, stream_id=7), NEXT),                                   # the reader's stream, in order
    (_header(5, stream_id=8), OTHER_STREAM),                           # another stream of the model: refused
    (_header(1, stream_id=8), OTHER_STREAM),                           # even low numbers (not duplicates)
    (_header(1, stream_id=8, full_sync=True, part=0, parts=3), NEXT),  # a new stream's full sync: switch
    (_header(4, stream_id=8, full_sync=True, part=0, parts=3), NEXT),  # (a few updates may precede it)
    (_header(MAX_FULL_SYNC_JUMP + 2, stream_id=8, full_sync=True), OTHER_STREAM),
    (_header(1, stream_id=8, full_sync=True, part=1, parts=3), OTHER_STREAM),  # not its first part
    (_header(5 + MAX_FULL_SYNC_JUMP, stream_id=7, full_sync=True), NEXT),       # a full sync heals a gap ...
    (_header(6 + MAX_FULL_SYNC_JUMP, stream_id=7, full_sync=True), IMPLAUSIBLE),  # ... not an absurd one
    (_header(2 ** 64 - 1, stream_id=7, full_sync=True), IMPLAUSIBLE),   # a forged one would freeze the reader
])
def test_sequence_verdict_on_streams(header, expected):
    assert sequence_verdict(header, "m", next_sequence=5, stream_id=7) == expected


def test_a_cursor_without_a_stream_takes_the_first_it_meets_and_keeps_it():
    cursor = StreamCursor("m", next_sequence=3)
    assert cursor.verdict(_header(3, stream_id=9)) == NEXT
    cursor.advance(_header(3, stream_id=9))
    assert (cursor.next_sequence, cursor.stream_id) == (4, 9)
    assert cursor.verdict(_header(4, stream_id=10)) == OTHER_STREAM
    assert cursor.verdict(_header(2, stream_id=9)) == DUPLICATE


def test_other_model_wins_over_the_sequence_checks():
    # Sequence 1 is a duplicate and 7 a gap for this stream, but they belong to another model: ignored either way.
    assert sequence_verdict(_header(1, model_name="x"), "m", 5) == OTHER_MODEL
    assert sequence_verdict(_header(7, model_name="x"), "m", 5) == OTHER_MODEL


# message_changes -------------------------------------------------------------------------------------------


def test_message_changes_groups_rows_and_deletes_per_table_in_entry_order():
    message = _message(1, sparse=[
        (3, 2, [10, 11], [[1, 2], [3, 4]], []),
        (5, 1, [7], [[9]], [8]),
        (3, 2, [12], [[5, 6]], [20, 21]),
        (3, 2, [], [], [22]),  # a delete-only entry
    ])
    dense, tables = message_changes(message)
    assert dense == [] and sorted(tables) == [3, 5]
    t3 = tables[3]
    np.testing.assert_array_equal(t3.deleted, [20, 21, 22])  # deletes of both entries, in order
    np.testing.assert_array_equal(t3.keys, [10, 11, 12])
    np.testing.assert_array_equal(t3.rows, [[1, 2], [3, 4], [5, 6]])
    assert t3.deleted.dtype == t3.keys.dtype == np.int64 and t3.rows.dtype == np.float32
    np.testing.assert_array_equal(tables[5].deleted, [8])
    np.testing.assert_array_equal(tables[5].keys, [7])
    np.testing.assert_array_equal(tables[5].rows, [[9]])


def test_message_changes_dense_writes_keep_id_shape_and_offset():
    message = _message(1, dense=[(0, (2, 3), 2, [5, 6, 7]), (4, (), 0, [0.5])])
    dense, tables = message_changes(message)
    assert tables == {}
    assert [(w.id, w.shape, w.offset) for w in dense] == [(0, (2, 3), 2), (4, (), 0)]
    assert all(isinstance(w, DenseWrite) for w in dense)
    np.testing.assert_array_equal(dense[0].values, [5, 6, 7])
    np.testing.assert_array_equal(dense[1].values, [0.5])


def test_message_changes_checks_tables_and_widths_when_given():
    known = _message(1, sparse=[(3, 2, [1], [[1, 2]], [])])
    assert sorted(message_changes(known, {3: 2})[1]) == [3]
    with pytest.raises(ValueError, match=r"table id 9 is not one of this model's tables \(\[3, 5\]\)"):
        message_changes(_message(1, sparse=[(3, 2, [1], [[1, 2]], []), (9, 2, [1], [[1, 2]], [])]), {3: 2, 5: 4})
    with pytest.raises(ValueError, match="table id 3: rows of 2 floats, the model has 4"):
        message_changes(known, {3: 4})
    # Without table_widths nothing is checked: any table, any width.
    assert sorted(message_changes(_message(1, sparse=[(9, 7, [1], [[0] * 7], [])]))[1]) == [9]


def test_message_changes_checks_dense_entries_against_the_model_and_refuses_non_finite_values():
    shapes = {0: (2, 3), 4: ()}
    good = _message(1, dense=[(0, (2, 3), 2, [5, 6, 7])])
    assert [w.id for w in message_changes(good, dense_shapes=shapes)[0]] == [0]
    for message, error in [
        (_message(1, dense=[(7, (2, 3), 0, [1])]), r"dense id 7 is not one of this model's dense parameters \(\[0, 4\]\)"),
        (_message(1, dense=[(0, (3, 2), 0, [1])]), r"dense id 0: shape \[3, 2\], the model has \[2, 3\]"),
        (_message(1, dense=[(0, (2, 3), 5, [1, 2])]), r"dense id 0: 2 values at offset 5 overrun shape \[2, 3\]"),
        (_message(1, dense=[(0, (2, 3), 0, [1, np.nan])]), "dense id 0: NaN or infinite values"),
        (_message(1, dense=[(4, (), 0, [np.inf])]), "dense id 4: NaN or infinite values"),
        (_message(1, sparse=[(3, 2, [1, 2], [[1, 2], [np.nan, 0]], [])]), "table id 3: NaN or infinite values"),
    ]:
        with pytest.raises(ValueError, match=error):
            message_changes(message, {3: 2}, shapes)
    # A slice that overruns the shape its own entry names is refused even without the model's shapes.
    with pytest.raises(ValueError, match="overrun"):
        message_changes(_message(1, dense=[(0, (2,), 1, [1, 2])]))


# ParameterReplica ------------------------------------------------------------------------------------------


def test_replica_applies_deletes_before_rows_within_a_message():
    replica = ParameterReplica("m")
    replica.tables[3] = {7: np.zeros(2, np.float32), 8: np.ones(2, np.float32)}
    # The entry writing key 7 comes before the entry deleting it: deletes still go first, so 7 ends up written.
    message = _message(1, step=42, sparse=[(3, 2, [7], [[1.5, 2.5]], []), (3, 2, [], [], [7, 8])])
    message.header.positions[0] = 100
    assert replica.apply(message)
    keys, rows = replica.table_arrays(3)
    np.testing.assert_array_equal(keys, [7])          # 8 deleted, 7 deleted then re-written
    np.testing.assert_array_equal(rows, [[1.5, 2.5]])
    assert (replica.next_sequence, replica.step, replica.positions, replica.applied) == (2, 42, {0: 100}, 1)


def test_replica_writes_a_dense_slice_at_its_offset():
    replica = ParameterReplica("m")
    # A [2, 3] parameter, flattened [0..5]; values 5, 6, 7 at offset 2 land at flat 2, 3, 4.
    assert replica.apply(_message(1, dense=[(0, (2, 3), 2, [5, 6, 7])]))
    np.testing.assert_array_equal(replica.dense[0], [[0, 0, 5], [6, 7, 0]])
    # The next slice keeps what is there: flat 0, 1 become 1, 2.
    assert replica.apply(_message(2, dense=[(0, (2, 3), 0, [1, 2])]))
    np.testing.assert_array_equal(replica.dense[0], [[1, 2, 5], [6, 7, 0]])
    # Another shape starts from zeros: [3] with 9 at offset 1.
    assert replica.apply(_message(3, dense=[(0, (3,), 1, [9])]))
    np.testing.assert_array_equal(replica.dense[0], [0, 9, 0])


def test_replica_skips_and_counts_duplicates_and_ignores_other_models():
    replica = ParameterReplica("m")
    assert replica.apply(_message(1, sparse=[(3, 1, [1], [[1]], [])]))
    assert not replica.apply(_message(1, sparse=[(3, 1, [1], [[99]], [])]))  # a replay of 1 (values ignored)
    assert not replica.apply(_message(2, model_name="other", sparse=[(3, 1, [1], [[99]], [])]))
    assert (replica.applied, replica.skipped, replica.next_sequence) == (1, 1, 2)  # another model's is not "skipped"
    assert replica.tables[3][1].tolist() == [1]


def test_replica_refuses_a_gap_and_changes_nothing():
    replica = ParameterReplica("m")
    with pytest.raises(UpdateGapError, match=r"expected sequence 1, got 3: 2 message\(s\) missing"):
        replica.apply(_message(3, sparse=[(3, 1, [1], [[1]], [])]))
    assert (replica.tables, replica.next_sequence, replica.applied) == ({}, 1, 0)


def test_replica_refuses_an_unknown_table_before_applying_any_of_the_message():
    replica = ParameterReplica("m", table_widths={3: 1})
    with pytest.raises(ValueError, match="table id 4"):
        replica.apply(_message(1, sparse=[(3, 1, [1], [[1]], []), (4, 1, [2], [[2]], [])]))
    assert (replica.tables, replica.next_sequence) == ({}, 1)  # table 3's valid entry was not applied either


def test_a_full_sync_heals_a_gap_from_its_part_0():
    # max_bytes 2048: budget 2048 - 512 = 1536; a row of dim 2 takes 8 + 4 * 2 = 16 bytes,
    # so (1536 - 64) // 16 = 92 rows fit in a message: 100 rows make 2 parts (92 + 8).
    keys = np.arange(100, dtype=np.int64)
    values = np.stack([keys, -keys], axis=1).astype(np.float32)
    snapshot = UpdateSnapshot(step=9, create_time=0.0, positions={0: 5}, rows={3: (keys, values)}, full_sync=True)
    parts = [decode_update(m) for m in encode_update(snapshot, "m", 5, 2, 2048, {3: 2})]
    assert [(p.header.sequence, p.header.part, p.header.parts, p.header.full_sync, p.header.full_sync_end)
            for p in parts] == [(5, 0, 2, True, False), (6, 1, 2, True, True)]  # the last part ends the sync
    assert [len(p.sparse[0].keys) // 8 for p in parts] == [92, 8]

    replica = ParameterReplica("m", table_widths={3: 2})
    assert replica.apply(_message(1, sparse=[(3, 2, [500], [[1, 1]], [])]))  # then 2, 3, 4 are lost
    with pytest.raises(UpdateGapError, match="expected sequence 2, got 6"):
        replica.apply(parts[1])  # part 1 does not heal the gap
    assert replica.apply(parts[0]) and replica.next_sequence == 6
    assert replica.apply(parts[1]) and replica.next_sequence == 7
    got_keys, got_rows = replica.table_arrays(3)
    # the sync was applied whole, from its part 0: row 500, which it did not carry, is not the trainer's
    np.testing.assert_array_equal(got_keys, keys)
    np.testing.assert_array_equal(got_rows, values)
    assert (replica.step, replica.positions, replica.applied, replica.removed_by_sync) == (9, {0: 5}, 3, 1)


def test_a_full_sync_removes_rows_only_when_applied_whole_and_a_streamed_one_ends_at_its_flag():
    """Rows a reader holds that a full sync does not carry are removed at full_sync_end, only when the reader
    applied every message of the sync from its part 0; a streamed sync (parts 0: count unknown) ends at the
    flag, and ordinary updates between its messages count as carried."""
    def sync(sequence, part, keys, end=False, update_id=7):
        return _message(sequence, sparse=[(3, 1, keys, [[float(k)] for k in keys], [])], full_sync=True, part=part,
                        parts=0, full_sync_end=end, update_id=update_id)

    replica = ParameterReplica("m", table_widths={3: 1})
    assert replica.apply(_message(1, sparse=[(3, 1, [1, 2, 3, 99], [[1], [2], [3], [99]], [])]))
    assert replica.apply(sync(2, 0, [1]))
    assert replica.apply(_message(3, sparse=[(3, 1, [4], [[4]], [])]))  # trained meanwhile: the trainer has it
    assert replica.apply(sync(4, 1, [2, 3]))
    assert replica.table_arrays(3)[0].tolist() == [1, 2, 3, 4, 99]  # nothing removed before the end
    assert replica.apply(sync(5, 2, [], end=True))
    assert replica.table_arrays(3)[0].tolist() == [1, 2, 3, 4] and replica.removed_by_sync == 1

    # A sync whose middle message is lost removes nothing: the reader cannot tell what the trainer lacks.
    broken = ParameterReplica("m", table_widths={3: 1})
    assert broken.apply(_message(1, sparse=[(3, 1, [1, 99], [[1], [99]], [])]))
    assert broken.apply(sync(2, 0, [1], update_id=8))
    with pytest.raises(UpdateGapError):
        broken.apply(sync(4, 2, [], end=True, update_id=8))  # 3 was lost
    broken.next_sequence = 4
    assert broken.apply(sync(4, 2, [], end=True, update_id=8))
    assert broken.table_arrays(3)[0].tolist() == [1, 99] and broken.removed_by_sync == 0
    # parts 0 is only for a full sync; full_sync_end only ends one
    with pytest.raises(MalformedUpdateError, match="parts = 0 .* is valid only in a full sync"):
        decode_update(_message(1, parts=0).SerializeToString())
    with pytest.raises(MalformedUpdateError, match="full_sync_end on a message that is not"):
        decode_update(_message(1, full_sync_end=True).SerializeToString())
    assert decode_update(sync(5, 3, [1], end=True).SerializeToString()).header.full_sync_end


def test_replica_switches_to_a_new_stream_at_its_full_sync_and_refuses_its_other_messages():
    replica = ParameterReplica("m", table_widths={3: 1})
    assert replica.apply(_message(1, sparse=[(3, 1, [1], [[1]], [])], stream_id=5))
    assert replica.apply(_message(2, sparse=[(3, 1, [2], [[2]], [])], stream_id=5))
    # The trainer restarted on a topic that lost the stream: numbering starts again on stream 6.
    with pytest.raises(UpdateGapError, match="other_stream: expected sequence 3 of stream 5, got 1 of stream 6"):
        replica.apply(_message(1, sparse=[(3, 1, [9], [[9]], [])], stream_id=6))  # not a duplicate
    assert replica.apply(_message(2, sparse=[(3, 1, [1, 2], [[10], [20]], [])], stream_id=6, full_sync=True))
    assert (replica.cursor.stream_id, replica.next_sequence) == (6, 3)
    assert {k: float(v[0]) for k, v in replica.tables[3].items()} == {1: 10.0, 2: 20.0}
    with pytest.raises(UpdateGapError, match="other_stream"):
        replica.apply(_message(3, sparse=[(3, 1, [1], [[0]], [])], stream_id=5))  # the old stream is over
    with pytest.raises(UpdateGapError, match="implausible_sequence"):
        replica.apply(_message(2 ** 63, full_sync=True, stream_id=6))
    assert replica.apply(_message(3, sparse=[(3, 1, [1], [[11]], [])], stream_id=6))  # still following
