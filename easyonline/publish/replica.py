"""An in-memory copy of published parameters, built by applying update messages in order.

The reference reader of the update stream: it defines what applying means
(deletes first, then rows; dense slices written at their offset), skips
messages already reflected (a sequence at or below the last applied) and
refuses gaps. Tests use it to prove the stream reproduces the trainer; the
serving processor follows the same rules.
"""
from typing import Dict, Optional

import numpy as np

from easyonline.protos import update_pb2
from easyonline.publish.update_codec import dense_slice, sparse_arrays


class UpdateGapError(ValueError):
    """A message's sequence number is not the next one: something in between was lost."""


# What to do with a message, given the stream's next expected sequence number.
OTHER_MODEL, DUPLICATE, GAP, NEXT = "other_model", "duplicate", "gap", "next"


def sequence_verdict(header: update_pb2.UpdateHeader, model_name: Optional[str], next_sequence: int) -> str:
    """OTHER_MODEL (another stream shares the topic), DUPLICATE (already reflected), GAP (something in
    between was lost) or NEXT (apply it)."""
    if model_name and header.model_name != model_name:
        return OTHER_MODEL
    if header.sequence < next_sequence:
        return DUPLICATE
    return GAP if header.sequence > next_sequence else NEXT


class ParameterReplica:
    def __init__(self, model_name: Optional[str] = None, next_sequence: int = 1):
        self.model_name = model_name
        self.next_sequence = next_sequence
        self.dense: Dict[int, np.ndarray] = {}
        self.tables: Dict[int, Dict[int, np.ndarray]] = {}
        self.step: Optional[int] = None
        self.positions: Dict[int, int] = {}
        self.applied = 0
        self.skipped = 0

    def apply(self, message: update_pb2.UpdateMessage) -> bool:
        """Applies a decoded message; False if it was already reflected; UpdateGapError on a gap."""
        header = message.header
        verdict = sequence_verdict(header, self.model_name, self.next_sequence)
        if verdict == OTHER_MODEL:
            return False
        if verdict == DUPLICATE:
            self.skipped += 1
            return False
        if verdict == GAP:
            raise UpdateGapError(f"expected sequence {self.next_sequence}, got {header.sequence}: "
                                 f"{header.sequence - self.next_sequence} message(s) missing")
        for entry in message.sparse:
            deleted, keys, values = sparse_arrays(entry)
            table = self.tables.setdefault(entry.table_id, {})
            for key in deleted.tolist():
                table.pop(key, None)
            for key, row in zip(keys.tolist(), values):
                table[key] = row
        for entry in message.dense:
            shape = tuple(entry.shape)
            current = self.dense.get(entry.id)
            if current is None or current.shape != shape:
                current = self.dense[entry.id] = np.zeros(shape, np.float32)
            values = dense_slice(entry)
            current.reshape(-1)[entry.offset:entry.offset + len(values)] = values
        self.next_sequence = header.sequence + 1
        self.step = header.global_step
        self.positions = dict(header.positions)
        self.applied += 1
        return True

    def table_arrays(self, table_id: int):
        """(sorted keys, rows) of one table."""
        table = self.tables.get(table_id, {})
        keys = np.array(sorted(table), np.int64)
        width = len(next(iter(table.values()))) if table else 0
        rows = np.stack([table[k] for k in keys.tolist()]) if len(keys) else np.zeros((0, width), np.float32)
        return keys, rows


def differences_from_model(replica: ParameterReplica, model, ids) -> list:
    """What differs between the replica and a live model (empty when they match bit for bit)."""
    from easyonline.publish.param_ids import dense_variables  # pylint: disable=g-import-not-at-top  (TensorFlow)
    found = []
    for name, layer in model.tables.embeddings.items():
        keys, values = (t.numpy() for t in layer.params.export())
        order = np.argsort(keys)
        got_keys, got_rows = replica.table_arrays(ids.tables[name][0])
        if not np.array_equal(got_keys, keys[order]):
            found.append(f"table {name}: {len(got_keys)} keys in the replica, {len(keys)} in the model")
        elif not np.array_equal(got_rows, values[order]):
            found.append(f"table {name}: rows differ")
    for name, variable in dense_variables(model).items():
        got = replica.dense.get(ids.dense[name])
        if got is None or not np.array_equal(got, variable.numpy()):
            found.append(f"dense {name}: {'missing' if got is None else 'values differ'}")
    return found
