"""What applying an update message means, for every reader: the replica, serving, base/delta loading.

One set of rules, so that a model rebuilt from the stream equals the
trainer's wherever it is rebuilt:
- a message of another model (another stream sharing the topic) is ignored;
- a sequence number below the next expected is a duplicate, already
  reflected (updates carry absolute values, so skipping it is exact);
- one above the next expected is a gap (something in between was lost),
  unless the message starts a full sync (part 0 of an update that re-sends
  every row and dense parameter), which heals any gap;
- within a message, every table's deletes are applied before its rows,
  and a dense entry writes its slice at its offset of the flattened
  parameter;
- an entry that does not fit the reader's parameters (an unknown table, rows
  of another width) refuses the whole message before anything is applied.
"""
import dataclasses
from typing import Dict, List, Optional, Tuple

import numpy as np

from easyonline.protos import update_pb2
from easyonline.updates.codec import dense_slice, sparse_arrays

# What to do with a message, given the stream's next expected sequence number.
OTHER_MODEL, DUPLICATE, GAP, NEXT = "other_model", "duplicate", "gap", "next"


def sequence_verdict(header: update_pb2.UpdateHeader, model_name: Optional[str], next_sequence: int) -> str:
    """OTHER_MODEL, DUPLICATE, GAP or NEXT (apply it) for a message, by the rules above."""
    if model_name and header.model_name != model_name:
        return OTHER_MODEL
    if header.sequence < next_sequence:
        return DUPLICATE
    if header.sequence > next_sequence and not (header.full_sync and header.part == 0):
        return GAP
    return NEXT


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


def message_changes(message: update_pb2.UpdateMessage, table_widths: Optional[Dict[int, int]] = None
                    ) -> Tuple[List[DenseWrite], Dict[int, TableChanges]]:
    """The message's dense writes and its changes per table id, checked against ``table_widths``.

    With ``table_widths`` ({table id: floats per row}), an entry of an unknown
    table or of another width raises ValueError before anything is applied.
    """
    dense = []
    for entry in message.dense:
        dense.append(DenseWrite(entry.id, tuple(entry.shape), entry.offset, dense_slice(entry)))
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
