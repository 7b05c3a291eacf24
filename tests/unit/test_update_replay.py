"""The update message format on its own: splitting at the size limit, bad messages, order rules."""
import numpy as np
import pytest

from easyonline.updates.replica import ParameterReplica, UpdateGapError
from easyonline.updates.codec import MalformedUpdateError, UpdateSnapshot, decode_update, encode_update


def _snapshot(rows=3000, dim=9):
    rng = np.random.default_rng(3)
    return UpdateSnapshot(
        step=42, create_time=1.7e9, positions={0: 100, 1: 250},
        dense={0: rng.random((120, 70), np.float32), 1: np.float32(0.5) * np.ones((), np.float32)},
        rows={3: (rng.choice(2**62, rows, replace=False).astype(np.int64), rng.random((rows, dim), np.float32))},
        deletes={3: np.arange(10, 2000, dtype=np.int64)})


@pytest.mark.parametrize("max_bytes", [4096, 20000, 1 << 20])
def test_every_message_fits_and_the_parts_rebuild_the_snapshot(max_bytes):
    snapshot = _snapshot()
    messages = encode_update(snapshot, "m", 7, 3, max_bytes, {3: 9})
    assert all(len(m) <= max_bytes for m in messages)
    assert (len(messages) > 1) == (max_bytes < 1 << 20)  # 120x70 floats alone exceed 20 kB: sliced
    decoded = [decode_update(m) for m in messages]
    assert [d.header.sequence for d in decoded] == list(range(7, 7 + len(messages)))
    assert {d.header.parts for d in decoded} == {len(messages)} and [d.header.part for d in decoded] == list(range(len(messages)))
    assert all(dict(d.header.positions) == {0: 100, 1: 250} and d.header.global_step == 42 for d in decoded)
    replica = ParameterReplica("m", next_sequence=7)
    replica.tables[3] = {int(k): np.zeros(9, np.float32) for k in range(10, 20)}  # rows the deletes remove
    for d in decoded:
        assert replica.apply(d)
    keys, rows = replica.table_arrays(3)
    order = np.argsort(snapshot.rows[3][0])
    np.testing.assert_array_equal(keys, snapshot.rows[3][0][order])
    np.testing.assert_array_equal(rows, snapshot.rows[3][1][order])
    np.testing.assert_array_equal(replica.dense[0], snapshot.dense[0])
    assert replica.dense[1] == 0.5 and replica.step == 42


def test_duplicates_are_skipped_and_gaps_refused():
    messages = [decode_update(m) for m in encode_update(_snapshot(200), "m", 1, 1, 8192, {3: 9})]
    replica = ParameterReplica("m")
    assert replica.apply(messages[0]) and not replica.apply(messages[0])
    with pytest.raises(UpdateGapError, match="expected sequence 2, got 3"):
        replica.apply(messages[2])
    assert replica.apply(messages[1]) and replica.skipped == 1
    other = ParameterReplica("another-model")
    assert not other.apply(messages[0])  # another model's stream on a shared topic


@pytest.mark.parametrize("mutate, reason", [
    (lambda b: b"", "empty"),
    (lambda b: b"\xff\xfe garbage \x00" * 7, "not an UpdateMessage"),
    (lambda b: b[: len(b) // 2], "not an UpdateMessage|inconsistent|do not fit"),
])
def test_malformed_messages_are_named(mutate, reason):
    data = encode_update(_snapshot(100), "m", 1, 1, 1 << 20, {3: 9})[0]
    with pytest.raises(MalformedUpdateError, match=reason):
        decode_update(mutate(data))


def test_inconsistent_entries_and_versions_are_refused():
    message = decode_update(encode_update(_snapshot(10), "m", 1, 1, 1 << 20, {3: 9})[0])
    rows = next(e for e in message.sparse if e.keys)
    rows.values = rows.values[:-4]
    with pytest.raises(MalformedUpdateError, match="inconsistent"):
        decode_update(message.SerializeToString())
    message = decode_update(encode_update(_snapshot(10), "m", 1, 1, 1 << 20, {3: 9})[0])
    message.header.format_version = 99
    with pytest.raises(MalformedUpdateError, match="format_version 99"):
        decode_update(message.SerializeToString())
