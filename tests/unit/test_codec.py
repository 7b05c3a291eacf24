"""The update wire format (updates/codec.py) on its own: round trip, splitting under the limit, malformed bytes.

Messages are reassembled here by hand (dense slices by offset, rows and deletes in order) so the
codec is checked against its contract, not against another reader of the package.
"""
import math

import numpy as np
import pytest

import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.protos import update_pb2
from easyonline.updates.codec import (FORMAT_VERSION, MalformedUpdateError, UpdateSnapshot, decode_update,
                                      dense_slice, describe, encode_update, sparse_arrays)

BIG = 1 << 20  # one message holds everything below


def _reassemble(messages):
    """(dense {id: array of its shape}, rows {table: (keys, values)}, deletes {table: keys}) from decoded parts.

    Every dense value must be written exactly once; keys keep the order they arrive in.
    """
    flat, shapes, written = {}, {}, {}
    keys, values, deletes = {}, {}, {}
    for message in messages:
        for entry in message.dense:
            shape = tuple(entry.shape)
            size = math.prod(shape)
            flat.setdefault(entry.id, np.zeros(size, np.float32))
            written.setdefault(entry.id, np.zeros(size, np.int64))
            assert shapes.setdefault(entry.id, shape) == shape  # every slice carries the full shape
            part = dense_slice(entry)
            flat[entry.id][entry.offset:entry.offset + len(part)] = part
            written[entry.id][entry.offset:entry.offset + len(part)] += 1
        for entry in message.sparse:
            deleted, k, v = sparse_arrays(entry)
            deletes.setdefault(entry.table_id, []).extend(deleted.tolist())
            if len(k):
                keys.setdefault(entry.table_id, []).append(k)
                values.setdefault(entry.table_id, []).append(v)
    for param_id, counts in written.items():
        assert counts.tolist() == [1] * len(counts), f"dense {param_id}: values written {counts.tolist()} times"
    dense = {i: flat[i].reshape(shapes[i]) for i in flat}
    rows = {t: (np.concatenate(keys[t]), np.concatenate(values[t])) for t in keys}
    return dense, rows, {t: np.array(d, np.int64) for t, d in deletes.items()}


def _snapshot():
    return UpdateSnapshot(
        step=42, create_time=1700000000.25, positions={0: 100, 3: 7},
        dense={0: np.arange(6, dtype=np.float32).reshape(2, 3), 1: np.array(0.5, np.float32)},
        # keys at the ends of int64 and negative ones travel as raw little-endian int64
        rows={5: (np.array([3, -7, 2**63 - 1], np.int64), np.array([[1, 2], [3, 4], [-0.5, 1e30]], np.float32))},
        deletes={5: np.array([9, 10], np.int64), 6: np.array([-(2**63)], np.int64)})


def test_one_message_round_trip_of_dense_rows_and_deletes():
    snapshot = _snapshot()
    data = encode_update(snapshot, "ctr", first_sequence=11, update_id=4, max_bytes=BIG, table_dims={5: 2, 6: 8})
    assert len(data) == 1
    message = decode_update(data[0])
    h = message.header
    assert (h.model_name, h.format_version, h.global_step, h.sequence) == ("ctr", FORMAT_VERSION, 42, 11)
    assert (h.update_id, h.part, h.parts, h.full_sync) == (4, 0, 1, False)
    assert h.create_time == 1700000000.25 and dict(h.positions) == {0: 100, 3: 7}
    dense, rows, deletes = _reassemble([message])
    np.testing.assert_array_equal(dense[0], [[0, 1, 2], [3, 4, 5]])
    assert dense[1].shape == () and dense[1] == 0.5  # a scalar keeps shape [] (one value)
    assert rows[5][0].tolist() == [3, -7, 2**63 - 1]
    np.testing.assert_array_equal(rows[5][1], np.float32([[1, 2], [3, 4], [-0.5, 1e30]]))  # bit for bit
    assert deletes[5].tolist() == [9, 10] and deletes[6].tolist() == [-(2**63)]
    # a delete entry carries its table's dim (from table_dims) and no rows
    delete_entry = next(e for e in message.sparse if e.table_id == 6)
    assert delete_entry.dim == 8 and not delete_entry.keys and not delete_entry.values
    assert 6 not in rows


def test_full_sync_flag_and_empty_dense_parameter_arrive():
    snapshot = UpdateSnapshot(step=1, create_time=0.0, positions={}, full_sync=True,
                              dense={3: np.zeros((0, 4), np.float32)})
    (data,) = encode_update(snapshot, "m", 1, 1, BIG, {})
    message = decode_update(data)
    assert message.header.full_sync
    (entry,) = message.dense  # "at least one entry, so an empty parameter still arrives"
    assert entry.id == 3 and list(entry.shape) == [0, 4] and entry.values == b""


def test_snapshot_empty_and_counts():
    nothing = UpdateSnapshot(step=0, create_time=0.0, positions={},
                             rows={1: (np.zeros(0, np.int64), np.zeros((0, 2), np.float32))},
                             deletes={1: np.zeros(0, np.int64)})
    assert nothing.empty  # tables named, but no key in any of them
    assert nothing.counts() == {"dense": 0, "rows": 0, "deletes": 0}
    assert not _snapshot().empty
    # 2 dense parameters; 3 rows in table 5; 2 + 1 deletes in tables 5 and 6
    assert _snapshot().counts() == {"dense": 2, "rows": 3, "deletes": 3}
    only_delete = UpdateSnapshot(step=0, create_time=0.0, positions={}, deletes={1: np.array([4], np.int64)})
    assert not only_delete.empty


def _big_snapshot():
    rng = np.random.default_rng(7)
    return UpdateSnapshot(
        step=9, create_time=5.0, positions={0: 1, 1: 2},
        dense={2: rng.random((40, 50), np.float32),  # 2000 floats = 8000 bytes: more than one 4096-byte message
               0: np.array([1.5, -2.5], np.float32)},
        rows={1: (np.arange(1000, 1300, dtype=np.int64)[::-1].copy(), rng.random((300, 4), np.float32)),
              0: (np.array([5], np.int64), np.ones((1, 3), np.float32))},
        deletes={1: np.arange(600, dtype=np.int64) * 3})


def test_split_below_max_bytes_numbers_parts_and_rebuilds_the_snapshot():
    snapshot = _big_snapshot()
    max_bytes = 4096
    data = encode_update(snapshot, "m", first_sequence=100, update_id=8, max_bytes=max_bytes,
                         table_dims={0: 3, 1: 4})
    # payload: 8000 + 8 dense bytes, 300 * (8 + 16) + (8 + 12) row bytes, 600 * 8 delete bytes = 20,028 bytes,
    # so at least ceil(20028 / 4096) = 5 messages. A new message is opened only when the next item
    # (<= 24 bytes) does not fit in 4096 - 512 (header reserve), so every message but the last carries
    # > 3/4 x 4096 = 3072 bytes: (n - 1) x 3072 < 20028 gives n <= 7.
    assert 5 <= len(data) <= 7
    assert all(len(d) <= max_bytes for d in data), [len(d) for d in data]
    messages = [decode_update(d) for d in data]
    n = len(messages)
    assert [m.header.sequence for m in messages] == list(range(100, 100 + n))
    assert [m.header.part for m in messages] == list(range(n))
    assert {m.header.parts for m in messages} == {n} and {m.header.update_id for m in messages} == {8}
    # every part carries the whole header, so it can be applied on its own
    assert all(m.header.global_step == 9 and dict(m.header.positions) == {0: 1, 1: 2} for m in messages)
    dense, rows, deletes = _reassemble(messages)
    np.testing.assert_array_equal(dense[2], snapshot.dense[2])
    np.testing.assert_array_equal(dense[0], [1.5, -2.5])
    for table in (0, 1):  # each key exactly once, in the order given (1300..1001 is descending)
        np.testing.assert_array_equal(rows[table][0], snapshot.rows[table][0])
        np.testing.assert_array_equal(rows[table][1], snapshot.rows[table][1])
    np.testing.assert_array_equal(deletes[1], snapshot.deletes[1])
    # the 2000-float parameter was sliced: contiguous offsets 0, a, a + b, ... covering 2000 values
    slices = [(e.offset, len(e.values) // 4) for m in messages for e in m.dense if e.id == 2]
    assert len(slices) >= 2 and slices[0][0] == 0
    assert all(o2 == o1 + n1 for (o1, n1), (o2, _) in zip(slices, slices[1:]))
    assert slices[-1][0] + slices[-1][1] == 2000


def test_deletes_come_before_any_row_of_the_update():
    messages = [decode_update(d) for d in encode_update(_big_snapshot(), "m", 1, 1, 4096, {0: 3, 1: 4})]
    order = [("delete" if e.deleted_keys else "rows") for m in messages for e in m.sparse]
    last_delete = max(i for i, kind in enumerate(order) if kind == "delete")
    first_rows = min(i for i, kind in enumerate(order) if kind == "rows")
    assert last_delete < first_rows, order


def test_a_limit_too_small_for_the_header_is_refused():
    # 4 x the 512-byte header reserve = 2048 is the smallest limit accepted
    with pytest.raises(ValueError, match="max_bytes=2047 is too small"):
        encode_update(_snapshot(), "m", 1, 1, 2047, {5: 2, 6: 8})
    assert len(encode_update(_snapshot(), "m", 1, 1, 2048, {5: 2, 6: 8})) >= 1


def test_a_header_larger_than_its_reserve_is_refused_not_sent_oversized():
    # a 1,500-byte model name in every header, on messages filled up to 2048 - 512 payload bytes
    snapshot = UpdateSnapshot(step=1, create_time=0.0, positions={}, dense={0: np.zeros(1000, np.float32)})
    with pytest.raises(ValueError, match="exceeds max_message_bytes=2048"):
        encode_update(snapshot, "m" * 1500, 1, 1, 2048, {})


def _message(**header):
    message = update_pb2.UpdateMessage()
    fields = dict(model_name="m", format_version=FORMAT_VERSION, sequence=1, part=0, parts=1)
    fields.update(header)
    for name, value in fields.items():
        setattr(message.header, name, value)
    return message


def test_a_well_formed_hand_built_message_decodes():
    message = _message()
    message.dense.add(id=0, shape=[2, 2], offset=2, values=np.float32([7, 8]).tobytes())  # values 2..3 of 4
    message.sparse.add(table_id=1, dim=2, keys=np.int64([4]).tobytes(), values=np.float32([1, 2]).tobytes(),
                       deleted_keys=np.int64([5, 6]).tobytes())
    decoded = decode_update(message.SerializeToString())
    assert dense_slice(decoded.dense[0]).tolist() == [7.0, 8.0]
    deleted, keys, values = sparse_arrays(decoded.sparse[0])
    assert deleted.tolist() == [5, 6] and keys.tolist() == [4] and values.tolist() == [[1.0, 2.0]]


def _bad(mutate):
    message = _message()
    mutate(message)
    return message.SerializeToString()


@pytest.mark.parametrize("data, reason", [
    (b"", "empty message"),
    (b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", "not an UpdateMessage"),
    (_message().SerializeToString()[:-1], "not an UpdateMessage"),  # cut inside the header
    (_bad(lambda m: setattr(m.header, "format_version", 2)), "format_version 2, this reader knows 1"),
    (_bad(lambda m: setattr(m.header, "format_version", 0)), "format_version 0"),
    (_bad(lambda m: setattr(m.header, "sequence", 0)), "lacks a sequence number or model name"),
    (_bad(lambda m: setattr(m.header, "model_name", "")), "lacks a sequence number or model name"),
    (_bad(lambda m: setattr(m.header, "parts", 0)), "parts = 0 .* valid only in a full sync"),
    (_bad(lambda m: (setattr(m.header, "parts", 2), setattr(m.header, "part", 2))), "part 2 of 2"),
    (_bad(lambda m: setattr(m.header, "part", 3)), "part 3 of 1"),
    # 6 value bytes are not whole float32s
    (_bad(lambda m: m.dense.add(id=1, shape=[4], values=b"\0" * 6)), "dense id 1: 6 value bytes"),
    # offset 3 + 2 values = 5 > 2 x 2 = 4
    (_bad(lambda m: m.dense.add(id=2, shape=[2, 2], offset=3, values=b"\0" * 8)), "do not fit shape \\[2, 2\\]"),
    # a scalar (shape []) holds 1 value, not 2
    (_bad(lambda m: m.dense.add(id=3, values=b"\0" * 8)), "dense id 3"),
    (_bad(lambda m: m.sparse.add(table_id=4, dim=0, deleted_keys=b"\0" * 8)), "table id 4: .* dim 0"),
    (_bad(lambda m: m.sparse.add(table_id=5, dim=1, keys=b"\0" * 7, values=b"\0" * 4)), "table id 5: 7 key bytes"),
    (_bad(lambda m: m.sparse.add(table_id=6, dim=1, deleted_keys=b"\0" * 9)), "table id 6"),
    # 2 keys x dim 3 x 4 bytes = 24 value bytes expected, 20 given
    (_bad(lambda m: m.sparse.add(table_id=7, dim=3, keys=b"\0" * 16, values=b"\0" * 20)),
     "table id 7: 16 key bytes, 20 value bytes and dim 3 are inconsistent"),
])
def test_malformed_bytes_raise_malformed_update_error(data, reason):
    with pytest.raises(MalformedUpdateError, match=reason):
        decode_update(data)


def test_malformed_update_error_is_a_value_error():
    # callers that catch ValueError (bad input in general) also catch a malformed update
    assert issubclass(MalformedUpdateError, ValueError)


def test_describe_summarizes_a_part():
    message = _message(sequence=12, global_step=300, update_id=5, part=1, parts=3, create_time=1.23456)
    message.header.positions[0] = 40
    message.dense.add(id=0, shape=[1], values=np.float32([1]).tobytes())
    message.sparse.add(table_id=2, dim=1, keys=np.int64([7, 8, 9]).tobytes(), values=np.float32([1, 2, 3]).tobytes(),
                       deleted_keys=np.int64([3]).tobytes())
    message.sparse.add(table_id=4, dim=1, deleted_keys=np.int64([5]).tobytes())
    message.sparse.add(table_id=2, dim=1, keys=np.int64([10]).tobytes(), values=np.float32([4]).tobytes(),
                       deleted_keys=np.int64([1, 2]).tobytes())
    summary = describe(message, sample_keys=2)
    assert summary == {"stream": 0, "sequence": 12, "step": 300, "update": 5, "part": "2/3", "model": "m",
                       "created": 1.235, "positions": {0: 40}, "dense": 1,
                       "rows": {2: 4},  # 3 + 1 keys over two entries of table 2; table 4 only deletes
                       "deletes": {2: 3, 4: 1},  # 1 + 2 deleted keys of table 2
                       "sample_keys": summary["sample_keys"]}
    # at most 2 sample keys of table 2, taken from its keys; none for table 4, which has no rows
    assert list(summary["sample_keys"]) == [2]
    assert 1 <= len(summary["sample_keys"][2]) <= 2 and set(summary["sample_keys"][2]) <= {7, 8, 9, 10}
    assert "sample_keys" not in describe(message) and "full_sync" not in summary
    message.header.full_sync = True
    assert describe(message)["full_sync"] is True


def test_a_row_larger_than_a_message_is_refused_not_looped_on():
    # one row of 1000 floats is 8 + 4000 bytes: more than a 4096-byte message holds after its header
    snapshot = UpdateSnapshot(1, 0.0, {}, rows={0: (np.array([1], np.int64), np.zeros((1, 1000), np.float32))})
    with pytest.raises(ValueError, match="raise max_message_bytes"):
        encode_update(snapshot, "m", 1, 1, 4096, {0: 1000})
