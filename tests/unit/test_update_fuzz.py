"""Structure-aware fuzzing of update messages: whatever arrives, a reader either applies it whole or
refuses it with a named error, and a refused message changes nothing.

Seeded and bounded (a thousand messages, a few seconds): mutated fields of valid messages (sequence
numbers, stream ids, parts, shapes, offsets, widths, NaN/Inf values, odd byte lengths) and mutated bytes
of their encoding go through decode_update and a ParameterReplica checking against the model's
parameters, as serving does.
"""
import copy
import random

import numpy as np

from easyonline.protos import update_pb2
from easyonline.updates.codec import MalformedUpdateError, UpdateSnapshot, decode_update, encode_update
from easyonline.updates.replica import ParameterReplica

WIDTHS = {3: 4, 5: 2}
SHAPES = {0: (3, 2), 1: ()}
STREAM = 42


def _valid(sequence: int, stream_id: int, rng: np.random.Generator) -> update_pb2.UpdateMessage:
    keys = rng.integers(-2**62, 2**62, size=6, dtype=np.int64)
    snapshot = UpdateSnapshot(step=sequence, create_time=1.0, positions={0: sequence},
                              dense={0: rng.normal(size=(3, 2)).astype(np.float32), 1: np.float32(0.5) * np.ones(())},
                              rows={3: (keys, rng.normal(size=(6, 4)).astype(np.float32)),
                                    5: (keys[:2], rng.normal(size=(2, 2)).astype(np.float32))},
                              deletes={5: keys[4:]})
    (data,) = encode_update(snapshot, "m", sequence, sequence, 1 << 20, WIDTHS, stream_id)
    return decode_update(data)


def _mutate_fields(message: update_pb2.UpdateMessage, rng: random.Random) -> None:
    header = message.header
    choice = rng.randrange(14)
    if choice == 0:
        header.sequence = rng.choice([0, 1, header.sequence + 1, header.sequence + 2, 2**63, 2**64 - 1])
    elif choice == 1:
        header.stream_id = rng.choice([0, STREAM + 1, 2**64 - 1])
    elif choice == 2:
        header.full_sync = True
        header.sequence = rng.choice([header.sequence + 5, 2**64 - 1, 1])
    elif choice == 3:
        header.part, header.parts = rng.choice([(1, 1), (0, 0), (3, 2), (0, 2)])
    elif choice == 4 and message.dense:
        message.dense[0].shape[:] = rng.choice([[2, 3], [6], [3, 2, 1], [], [-1, 2]])
    elif choice == 5 and message.dense:
        message.dense[0].offset = rng.choice([1, 5, 6, 2**40])
    elif choice == 6 and message.dense:
        message.dense[rng.randrange(len(message.dense))].id = rng.choice([2, 99, 2**31])
    elif choice == 7 and message.dense:
        values = bytearray(message.dense[0].values)
        values[0:4] = np.float32(rng.choice([np.nan, np.inf, -np.inf])).tobytes()
        message.dense[0].values = bytes(values)
    elif choice == 8 and message.sparse:
        message.sparse[0].dim = rng.choice([0, 1, 2, 8, 2**31])
    elif choice == 9 and message.sparse:
        message.sparse[rng.randrange(len(message.sparse))].table_id = rng.choice([4, 7, 2**31])
    elif choice == 10 and message.sparse:
        values = bytearray(message.sparse[0].values)
        values[-4:] = np.float32(rng.choice([np.nan, np.inf])).tobytes()
        message.sparse[0].values = bytes(values)
    elif choice == 11 and message.sparse:
        entry = message.sparse[0]
        field = rng.choice(["keys", "values", "deleted_keys"])
        setattr(entry, field, getattr(entry, field)[:-rng.randrange(1, 5)])
    elif choice == 12:
        header.format_version = rng.choice([0, 2])
    else:
        header.model_name = rng.choice(["", "other"])


def _state(replica: ParameterReplica):
    return (replica.next_sequence, replica.cursor.stream_id, replica.applied,
            {t: {k: v.tobytes() for k, v in rows.items()} for t, rows in replica.tables.items()},
            {i: v.tobytes() for i, v in replica.dense.items()})


def test_fuzzed_update_messages_are_applied_whole_or_refused_with_nothing_changed():
    rng, np_rng = random.Random(2026), np.random.default_rng(2026)
    replica = ParameterReplica("m", table_widths=WIDTHS, dense_shapes=SHAPES, stream_id=STREAM)
    outcomes = {"applied": 0, "malformed": 0, "refused": 0, "skipped": 0}
    for round_index in range(1000):
        message = _valid(replica.next_sequence, replica.cursor.stream_id, np_rng)
        if round_index % 5:  # four in five mutated
            if rng.random() < 0.7:
                for _ in range(rng.randrange(1, 3)):
                    _mutate_fields(message, rng)
                data = message.SerializeToString()
            else:
                data = bytearray(message.SerializeToString())
                for _ in range(rng.randrange(1, 4)):
                    data[rng.randrange(len(data))] = rng.randrange(256)
                data = bytes(data[:rng.randrange(len(data) // 2, len(data) + 1)])
        else:
            data = message.SerializeToString()
        before = copy.deepcopy(_state(replica))
        try:
            decoded = decode_update(data)
        except MalformedUpdateError:
            outcomes["malformed"] += 1
            continue
        try:
            applied = replica.apply(decoded)
        except ValueError:  # UpdateGapError, an entry that does not fit: refused whole
            assert _state(replica) == before
            outcomes["refused"] += 1
            continue
        if not applied:
            assert _state(replica) == before
            outcomes["skipped"] += 1
            continue
        outcomes["applied"] += 1
        # (a mutation can make a legitimate new stream's full sync: the replica then follows that stream)
        assert (replica.cursor.stream_id, replica.next_sequence) == (decoded.header.stream_id,
                                                                     decoded.header.sequence + 1)
        for table_id, rows in replica.tables.items():
            assert table_id in WIDTHS and all(len(r) == WIDTHS[table_id] and np.isfinite(r).all()
                                              for r in rows.values())
        for param_id, value in replica.dense.items():
            assert value.shape == SHAPES[param_id] and np.isfinite(value).all()
    assert min(outcomes.values()) > 0, outcomes  # every path was exercised
