"""What applying an update message means, for every reader: the replica, serving, base/delta loading.

One set of rules, so that a model rebuilt from the stream equals the
trainer's wherever it is rebuilt:
- a message of another model (another stream sharing the topic) is ignored;
- a stream has an identity (``stream_id``, drawn by the publisher when it
  finds none of its model's messages on the topic: a new or recreated topic,
  or one whose retention removed them). A message of another stream of the
  same model is refused, unless it is the first message of a full sync
  near that stream's start (sequence at most ``MAX_FULL_SYNC_JUMP`` + 1: a
  few updates may precede the sync): then the reader switches to it. So
  numbering that restarts low on a new stream is never mistaken for
  duplicates;
- a sequence number below the next expected is a duplicate, already
  reflected (updates carry absolute values, so skipping it is exact);
- one above the next expected is a gap (something in between was lost),
  unless the message starts a full sync (part 0 of an update that re-sends
  every row and dense parameter), which heals a gap of up to
  ``MAX_FULL_SYNC_JUMP`` messages; a larger jump is implausible (a
  publisher never skips that many) and refused, so that one bad message
  cannot make every later one look like a duplicate;
- within a message, every table's deletes are applied before its rows,
  and a dense entry writes its slice at its offset of the flattened
  parameter;
- an entry that does not fit the reader's parameters (an unknown table or
  dense id, rows of another width, a dense shape or slice that is not the
  parameter's) or carries a NaN or infinite value refuses the whole message
  before anything is applied.
"""
import dataclasses
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from easyonline.protos import update_pb2
from easyonline.updates.codec import dense_slice, sparse_arrays

# What to do with a message, given where the reader is in the stream.
OTHER_MODEL, DUPLICATE, GAP, NEXT = "other_model", "duplicate", "gap", "next"
OTHER_STREAM, IMPLAUSIBLE = "other_stream", "implausible_sequence"
MAX_FULL_SYNC_JUMP = 1_000_000  # messages a full sync may skip (a week of one message a second is 604,800)


def sequence_verdict(header: update_pb2.UpdateHeader, model_name: Optional[str], next_sequence: int,
                     stream_id: Optional[int] = None) -> str:
    """OTHER_MODEL, OTHER_STREAM, DUPLICATE, GAP, IMPLAUSIBLE or NEXT (apply it), by the rules above.

    ``stream_id`` None: the reader has not seen its stream yet and takes the first it meets.
    """
    if model_name and header.model_name != model_name:
        return OTHER_MODEL
    starts_sync = header.full_sync and header.part == 0
    if stream_id is not None and header.stream_id != stream_id:
        return NEXT if starts_sync and header.sequence <= MAX_FULL_SYNC_JUMP + 1 else OTHER_STREAM
    if header.sequence < next_sequence:
        return DUPLICATE
    if header.sequence > next_sequence:
        if not starts_sync:
            return GAP
        if header.sequence - next_sequence > MAX_FULL_SYNC_JUMP:
            return IMPLAUSIBLE
    return NEXT


@dataclasses.dataclass
class StreamCursor:
    """Where a reader is in its model's update stream: the one place every reader keeps it."""
    model_name: Optional[str]
    next_sequence: int = 1
    stream_id: Optional[int] = None

    def verdict(self, header: update_pb2.UpdateHeader) -> str:
        return sequence_verdict(header, self.model_name, self.next_sequence, self.stream_id)

    def advance(self, header: update_pb2.UpdateHeader) -> None:
        """Records an applied message: the next expected one follows it, on its stream."""
        self.next_sequence = header.sequence + 1
        self.stream_id = header.stream_id


@dataclasses.dataclass
class DenseWrite:
    """Values to write at ``offset`` of the flattened dense parameter ``id`` of ``shape``."""
    id: int
    shape: Tuple[int, ...]
    offset: int
    values: np.ndarray


@dataclasses.dataclass
class TableChanges:
    """One table's changes in a message: delete ``deleted`` first, then write ``rows`` at ``keys``."""
    deleted: np.ndarray
    keys: np.ndarray
    rows: np.ndarray


def message_changes(message: update_pb2.UpdateMessage, table_widths: Optional[Dict[int, int]] = None,
                    dense_shapes: Optional[Mapping[int, Sequence[int]]] = None
                    ) -> Tuple[List[DenseWrite], Dict[int, TableChanges]]:
    """The message's dense writes and its changes per table id, checked by the rules above.

    With ``table_widths`` ({table id: floats per row}), an entry of an unknown
    table or of another width raises ValueError; with ``dense_shapes`` ({dense
    id: shape}), so does a dense entry of an unknown id or another shape.
    Either way, a slice that overruns its parameter, or a NaN or infinite
    value, raises ValueError. Nothing is applied before every entry passed.
    """
    dense = []
    for entry in message.dense:
        shape = tuple(entry.shape)
        if dense_shapes is not None:
            if entry.id not in dense_shapes:
                raise ValueError(f"dense id {entry.id} is not one of this model's dense parameters "
                                 f"({sorted(dense_shapes)})")
            if shape != tuple(dense_shapes[entry.id]):
                raise ValueError(f"dense id {entry.id}: shape {list(shape)}, the model has "
                                 f"{list(dense_shapes[entry.id])}")
        values = dense_slice(entry)
        if entry.offset + len(values) > int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f"dense id {entry.id}: {len(values)} values at offset {entry.offset} overrun shape "
                             f"{list(shape)}")
        if not np.isfinite(values).all():
            raise ValueError(f"dense id {entry.id}: NaN or infinite values")
        dense.append(DenseWrite(entry.id, shape, entry.offset, values))
    grouped: Dict[int, List[List[np.ndarray]]] = {}
    for entry in message.sparse:
        if table_widths is not None:
            if entry.table_id not in table_widths:
                raise ValueError(f"table id {entry.table_id} is not one of this model's tables "
                                 f"({sorted(table_widths)})")
            if entry.dim != table_widths[entry.table_id]:
                raise ValueError(f"table id {entry.table_id}: rows of {entry.dim} floats, the model has "
                                 f"{table_widths[entry.table_id]}")
        deleted, keys, values = sparse_arrays(entry)
        if not np.isfinite(values).all():
            raise ValueError(f"table id {entry.table_id}: NaN or infinite values")
        parts = grouped.setdefault(entry.table_id, [[], [], []])
        parts[0].append(deleted)
        parts[1].append(keys)
        parts[2].append(values)
    tables = {}
    for table_id, (deleted_parts, key_parts, row_parts) in grouped.items():
        tables[table_id] = TableChanges(np.concatenate(deleted_parts).astype(np.int64, copy=False),
                                        np.concatenate(key_parts).astype(np.int64, copy=False),
                                        np.concatenate(row_parts))
    return dense, tables
