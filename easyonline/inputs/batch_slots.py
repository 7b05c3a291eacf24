"""A ring of shared-memory slots that carries the reader process's parsed batches to the trainer.

Through the multiprocessing queue alone a DeepFM batch of 1,024 samples
(~410 KB: ids, dense values, labels and the lines) is pickled, written
through a 64 KB pipe, read back and unpickled: ~0.5 ms of the trainer's CPU
per batch, on the thread that holds the GIL the training step needs, and as
much again in the reader. Written into shared memory instead, only a small
tuple crosses the queue, and the trainer copies the arrays once, into the
tensors it trains on.

When a slot may be written again: the queue holds at most ``depth`` items
and the trainer takes the next item only after copying out the one before.
So once the reader's put of batch n-1 returned, every batch up to n-depth-2
has been copied out, and a ring of depth + 2 slots never overwrites a batch
being read; the ring has one more for margin.

The slots live in a file under /dev/shm that the reader maps and the trainer
then unlinks, so nothing is left behind even if both are killed. A batch
that does not fit its slot, or a machine without /dev/shm, falls back to
the queue.
"""
import logging
import mmap
import os
import tempfile
from typing import List, Optional, Sequence, Tuple

import numpy as np

from easyonline.features.vector_csv import VectorBatch
from easyonline.features.multi_value_numpy import RaggedArray

log = logging.getLogger(__name__)

SHM_DIR = "/dev/shm"
MAX_SLOT_BYTES = 16 << 20
ALIGN = 64

# (blob length, rows, ids columns, dense columns, label columns, values of each ragged array): enough, with
# the ring's layout, to find every array.
Layout = Tuple[int, int, int, int, int, Tuple[int, ...]]


def slot_bytes_for(batch_size: int, id_columns: int, dense_columns: int, label_columns: int,
                   ragged_row_bytes: int = 0, ragged_arrays: int = 0) -> int:
    """A slot for twice batch_size rows (messages of several lines overshoot a batch) of ~256-byte lines;
    ``ragged_row_bytes``: the multi-value features' bytes a row (VectorCsvParser.ragged_row_bytes)."""
    rows = 2 * batch_size
    row_bytes = 8 * id_columns + 4 * dense_columns + 4 * label_columns + ragged_row_bytes + 256
    return min(rows * row_bytes + (4 + 2 * ragged_arrays) * ALIGN, MAX_SLOT_BYTES)


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


class BatchSlots:
    """``count`` slots of ``slot_bytes`` in one shared file; ``write`` in the reader, ``read`` in the trainer."""

    def __init__(self, path: str, count: int, slot_bytes: int, create: bool):
        self.path, self.count, self.slot_bytes = path, count, slot_bytes
        fd = os.open(path, os.O_RDWR)
        try:
            if create:
                os.posix_fallocate(fd, 0, count * slot_bytes)  # ENOSPC now, not SIGBUS at the first write
            self._map = mmap.mmap(fd, count * slot_bytes)
        finally:
            os.close(fd)

    @classmethod
    def create(cls, count: int, slot_bytes: int) -> Optional["BatchSlots"]:
        """A new ring in /dev/shm, or None (and why, once in the log) where it cannot be made."""
        path = None
        try:
            fd, path = tempfile.mkstemp(prefix="easyonline-batches-", dir=SHM_DIR)
            os.close(fd)
            return cls(path, count, slot_bytes, create=True)
        except (OSError, ValueError) as e:
            if path:
                unlink_quietly(path)
            log.info("batches cross from the reader process through its queue (no shared memory: %s)", e)
            return None

    def write(self, index: int, blob: bytes, vectors: VectorBatch) -> Optional[Layout]:
        """Copies a batch into slot ``index % count``; its layout, or None if it does not fit (send it whole)."""
        layout = (len(blob), vectors.size, vectors.ids.shape[1], vectors.dense.shape[1], vectors.labels.shape[1],
                  tuple(len(r.flat_values) for r in vectors.ragged))
        _, rows, id_columns, dense_columns, label_columns, _ = layout
        dtypes = [r.flat_values.dtype for r in vectors.ragged]
        ids_at, dense_at, labels_at, ragged_at, blob_at, end = self._offsets(index, layout, dtypes)
        if end > (index % self.count + 1) * self.slot_bytes:
            return None
        np.ndarray((rows, id_columns), np.int64, self._map, ids_at)[...] = vectors.ids
        np.ndarray((rows, dense_columns), np.float32, self._map, dense_at)[...] = vectors.dense
        np.ndarray((rows, label_columns), np.float32, self._map, labels_at)[...] = vectors.labels
        for ragged, (values_at, splits_at) in zip(vectors.ragged, ragged_at):
            np.ndarray(ragged.flat_values.shape, ragged.flat_values.dtype, self._map, values_at)[...] = \
                ragged.flat_values
            np.ndarray((rows + 1,), np.int64, self._map, splits_at)[...] = ragged.row_splits
        self._map[blob_at:blob_at + len(blob)] = blob
        return layout

    def read(self, index: int, layout: Layout, id_names, dense_names, label_names, ragged_names: Sequence[str] = (),
             ragged_dtypes: Sequence[type] = ()) -> Tuple[bytes, VectorBatch]:
        """The blob (copied) and arrays (views: copy them before the slot is written again) of a batch;
        ``ragged_names`` and their values' ``ragged_dtypes`` as VectorCsvParser gives them."""
        blob_length, rows, id_columns, dense_columns, label_columns, ragged_lengths = layout
        dtypes: List[np.dtype] = [np.dtype(d) for d in ragged_dtypes]
        ids_at, dense_at, labels_at, ragged_at, blob_at, _ = self._offsets(index, layout, dtypes)
        ragged = tuple(RaggedArray(np.ndarray((length,), dtype, self._map, values_at),
                                   np.ndarray((rows + 1,), np.int64, self._map, splits_at))
                       for length, dtype, (values_at, splits_at) in zip(ragged_lengths, dtypes, ragged_at))
        vectors = VectorBatch(tuple(id_names), np.ndarray((rows, id_columns), np.int64, self._map, ids_at),
                              tuple(dense_names), np.ndarray((rows, dense_columns), np.float32, self._map, dense_at),
                              tuple(label_names),
                              np.ndarray((rows, label_columns), np.float32, self._map, labels_at), rows,
                              tuple(ragged_names), ragged)
        return self._map[blob_at:blob_at + blob_length], vectors

    def _offsets(self, index: int, layout: Layout, dtypes: Sequence[np.dtype]):
        blob_length, rows, id_columns, dense_columns, label_columns, ragged_lengths = layout
        ids_at = (index % self.count) * self.slot_bytes
        dense_at = _aligned(ids_at + 8 * rows * id_columns)
        labels_at = _aligned(dense_at + 4 * rows * dense_columns)
        at = _aligned(labels_at + 4 * rows * label_columns)
        ragged_at = []
        for length, dtype in zip(ragged_lengths, dtypes):
            splits_at = _aligned(at + length * dtype.itemsize)
            ragged_at.append((at, splits_at))
            at = _aligned(splits_at + 8 * (rows + 1))
        return ids_at, dense_at, labels_at, ragged_at, at, at + blob_length

    def close(self) -> None:
        try:
            self._map.close()
        except BufferError:  # a view is still alive somewhere; the mapping goes with the process
            pass


def unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
