"""Following a full sync to its end, so that a reader can drop the rows the sync did not carry.

A full sync re-sends every row and dense parameter the trainer has. Adding
them is not enough to make a reader equal to the trainer: rows the reader
holds that the trainer no longer has (a restore from backup, a checkpoint
older than what was published before a crash, deletes lost in a gap) would
stay forever. So the reader remembers which keys the sync carried, and at the
sync's last message (``full_sync_end``) removes every other row, but only if it
applied the whole sync: part 0 onwards, every message applied, no gap and no
refusal in between. Otherwise it stays behind until the next full sync.

Messages applied between the sync's part 0 and its end that are not part of
it (a streamed sync may interleave ordinary updates) count as carried too:
their rows are the trainer's current ones.
"""
from typing import Dict, List, Optional

import numpy as np

from easyonline.protos import update_pb2


class FullSyncTracker:
    """``applied(header, keys)`` after each applied message, ``broken()`` after a gap or refusal; at the
    end ``applied`` returns the keys to keep per table id (None: no complete sync ended here)."""

    def __init__(self) -> None:
        self.update_id: Optional[int] = None  # the sync being followed, None: none
        self._carried: Dict[int, List[np.ndarray]] = {}
        self.completed = 0

    @property
    def following(self) -> bool:
        return self.update_id is not None

    def broken(self) -> None:
        """A message was lost or refused: the sync in progress can no longer prove what the trainer lacks."""
        self.update_id = None
        self._carried = {}

    def applied(self, header: update_pb2.UpdateHeader, keys: Dict[int, np.ndarray]
                ) -> Optional[Dict[int, np.ndarray]]:
        """Records an applied message and the keys it wrote per table id; at the end of a sync followed from
        its part 0, the keys it carried per table id (sorted, unique): every other row is to be removed."""
        if header.full_sync and header.part == 0:
            self.update_id = header.update_id
            self._carried = {}
        if self.update_id is None:
            return None
        for table_id, table_keys in keys.items():
            if len(table_keys):
                self._carried.setdefault(table_id, []).append(np.asarray(table_keys, np.int64))
        if not (header.full_sync_end and header.full_sync and header.update_id == self.update_id):
            return None
        carried = {table_id: np.unique(np.concatenate(parts)) for table_id, parts in self._carried.items()}
        self.update_id = None
        self._carried = {}
        self.completed += 1
        return carried


def written_keys(message: update_pb2.UpdateMessage) -> Dict[int, np.ndarray]:
    """The keys whose rows ``message`` writes, by table id."""
    out: Dict[int, List[np.ndarray]] = {}
    for entry in message.sparse:
        if entry.keys:
            out.setdefault(entry.table_id, []).append(np.frombuffer(entry.keys, "<i8"))
    return {table_id: np.concatenate(parts) for table_id, parts in out.items()}


def rows_to_remove(held: np.ndarray, carried: Optional[np.ndarray]) -> np.ndarray:
    """The keys of ``held`` that a completed full sync did not carry."""
    held = np.asarray(held, np.int64)
    if carried is None or not len(carried):
        return held
    return held[~np.isin(held, carried, assume_unique=False)]
