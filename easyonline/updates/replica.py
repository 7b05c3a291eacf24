"""An in-memory copy of published parameters, built by applying update messages in order.

The reference reader of the update stream: it defines what applying means
(deletes first, then rows; dense slices written at their offset), skips
messages already reflected and refuses gaps, by the rules of
apply_rules.py, which the serving processor follows too. Tests and the demo
use it to prove the stream reproduces the trainer; base/delta loading uses it
to rebuild a saved model.
"""
from typing import Dict, Iterable, Optional, Tuple

import numpy as np

from easyonline.protos import update_pb2
from easyonline.updates.apply_rules import DUPLICATE, GAP, NEXT, OTHER_MODEL, StreamCursor, message_changes
from easyonline.updates.codec import decode_update
from easyonline.updates.full_sync import FullSyncTracker, rows_to_remove


class UpdateGapError(ValueError):
    """A message cannot follow the last one applied: something in between was lost, or it is of
    another stream, or its sequence number is implausible."""


class ParameterReplica:
    """Published parameters as numpy, rebuilt by the rules of apply_rules.py; refuses a gap by raising."""

    def __init__(self, model_name: Optional[str] = None, next_sequence: int = 1,
                 table_widths: Optional[Dict[int, int]] = None, stream_id: Optional[int] = None,
                 dense_shapes: Optional[Dict[int, Tuple[int, ...]]] = None):
        """``table_widths`` and ``dense_shapes``: the parameters to check messages against, as serving does
        (None: any table or dense parameter is taken as the message describes it)."""
        self.model_name = model_name
        self.cursor = StreamCursor(model_name, next_sequence, stream_id)
        self.table_widths = table_widths
        self.dense_shapes = dense_shapes
        self.dense: Dict[int, np.ndarray] = {}
        self.tables: Dict[int, Dict[int, np.ndarray]] = {}
        self.step: Optional[int] = None
        self.positions: Dict[int, int] = {}
        self.applied = 0
        self.skipped = 0
        self.full_sync = FullSyncTracker()
        self.removed_by_sync = 0  # rows a completed full sync did not carry, removed

    def apply(self, message: update_pb2.UpdateMessage) -> bool:
        """Applies a decoded message; False if it was already reflected; UpdateGapError on a gap."""
        header = message.header
        verdict = self.cursor.verdict(header)
        if verdict == OTHER_MODEL:
            return False
        if verdict == DUPLICATE:
            self.skipped += 1
            return False
        if verdict != NEXT:
            self.full_sync.broken()
        if verdict == GAP:
            raise UpdateGapError(f"expected sequence {self.next_sequence}, got {header.sequence}: "
                                 f"{header.sequence - self.next_sequence} message(s) missing")
        if verdict != NEXT:
            raise UpdateGapError(f"{verdict}: expected sequence {self.next_sequence} of stream "
                                 f"{self.cursor.stream_id}, got {header.sequence} of stream {header.stream_id}")
        try:
            dense, tables = message_changes(message, self.table_widths, self.dense_shapes)
        except ValueError:
            self.full_sync.broken()  # a sync this message belongs to is no longer whole
            raise
        for table_id, changes in tables.items():
            table = self.tables.setdefault(table_id, {})
            for key in changes.deleted.tolist():
                table.pop(key, None)
            for key, row in zip(changes.keys.tolist(), changes.rows):
                table[key] = row
        for write in dense:
            current = self.dense.get(write.id)
            if current is None or current.shape != write.shape:
                current = self.dense[write.id] = np.zeros(write.shape, np.float32)
            current.reshape(-1)[write.offset:write.offset + len(write.values)] = write.values
        self.cursor.advance(header)
        self.step = header.global_step
        self.positions = dict(header.positions)
        self.applied += 1
        carried = self.full_sync.applied(header, {table_id: c.keys for table_id, c in tables.items()})
        if carried is not None:  # a whole full sync ended: the rows it did not carry are not the trainer's
            for table_id, table in self.tables.items():
                for key in rows_to_remove(np.fromiter(table, np.int64, len(table)), carried.get(table_id)).tolist():
                    del table[key]
                    self.removed_by_sync += 1
        return True

    @property
    def next_sequence(self) -> int:
        return self.cursor.next_sequence

    @next_sequence.setter
    def next_sequence(self, value: int) -> None:
        self.cursor.next_sequence = value

    def table_arrays(self, table_id: int):
        """(sorted keys, rows) of one table."""
        table = self.tables.get(table_id, {})
        keys = np.array(sorted(table), np.int64)
        width = len(next(iter(table.values()))) if table else 0
        rows = np.stack([table[k] for k in keys.tolist()]) if len(keys) else np.zeros((0, width), np.float32)
        return keys, rows


def replay(records: Iterable[Tuple[int, bytes]], model_name: Optional[str] = None) -> ParameterReplica:
    """A fresh replica with every (position, encoded message) of ``records`` applied in order (as a reader's
    ``read_available`` returns them): what a server that read the stream from its start holds."""
    replica = ParameterReplica(model_name)
    for _, data in records:
        replica.apply(decode_update(data))
    return replica
