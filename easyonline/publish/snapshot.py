"""Reads the rows an update (or a base/delta save) carries, as they are in the tables now.

An incremental update reads its changed keys (``take_snapshot``). A full sync
or a base reads every row, so it never builds them all at once
(``full_sync_pieces``): one table shard is exported at a time (a single
process's table is one shard; on a cluster the chief pulls one ps shard at a
time) and handed to the encoder in chunks of ``chunk_rows`` rows. The extra
memory is the largest shard's export (8 + 4 * dim bytes a row) plus about two
chunks of messages.

Why a whole shard: TFRA 0.8.1 reads a table only whole (``Export``) or into
files (``SaveToFileSystem``, in buffers of ``buffer_size`` keys, but each
buffer under its own lock, walking the table from the start: rows inserted or
rehashed by training between buffers can be missed or repeated, and a full
sync that misses a row makes readers drop it).

Nor is ``Export`` consistent while another thread inserts new keys into the
table: an export taken during a training step can lack rows the table held
before the export began (seen with TFRA 0.8.1's CPU cuckoo table: a few rows
in one to four exports of a hundred while every step inserts new ids; lookups
are not affected). A full sync read so made every reader drop those rows
until they were trained again. So a single process's export holds the lock
its training step holds (``EagerTableRows.writing``): training waits for one
shard's export, and the export is of the table between two steps.
(A cluster's ps tables are written by its other trainers' processes while the
chief reads them: no lock spans those.)
"""
import threading
from typing import Any, Dict, Iterator, List, Optional, Protocol, Tuple

import numpy as np

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.embedding.change_tracker import split_changes, unique_keys
from easyonline.publish.nonfinite import NonFiniteGuard
from easyonline.updates.codec import DeletesPiece, DensePiece, Piece, RowsPiece, UpdateSnapshot
from easyonline.updates.param_ids import ParameterIds

tf = ensure_legacy_keras()


class TableRows(Protocol):
    """Reads a trainer's tables: eagerly in one process, through the session on a cluster's chief."""

    def names(self) -> List[str]:
        ...

    def export(self, table: str) -> Tuple[np.ndarray, np.ndarray]:
        """Every (key, row) of ``table``."""

    def export_shards(self, table: str) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
        """Every (key, row) of ``table``, one shard at a time (the next is read only when asked for)."""

    def lookup(self, keys: Dict[str, np.ndarray]) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
        """(rows, exists) of each table's ``keys``, all tables in one call: an update reads every table
        it changed, and a call per table cost ~0.6 ms of fixed overhead each (26 tables: 15 ms an update)."""


def _view(tensor) -> np.ndarray:
    """The eager tensor's values without a copy: ``numpy()`` copies (TF 2.16), which would double a shard's
    export; ``_numpy()`` is a read-only view that keeps the tensor alive. Falls back to ``numpy()``."""
    view = getattr(tensor, "_numpy", None)
    return view() if view is not None else tensor.numpy()


class EagerTableRows:
    """TableRows of a single process's tables (embedding.dynamic_tables.DynamicTables).

    ``writing``: the lock the thread that trains holds while a step writes the tables (EagerEngine's). Every
    export takes it (module docstring: an export beside an insert can miss rows); lookups do not need it.
    """

    def __init__(self, tables, writing: Optional[threading.Lock] = None):
        self._tables = tables
        self.writing = writing if writing is not None else threading.Lock()
        self._lookup_all: Any = None  # the concrete function reading every table, traced at first use

    def names(self) -> List[str]:
        return list(self._tables.embeddings)

    def export(self, table: str) -> Tuple[np.ndarray, np.ndarray]:
        with self.writing:
            keys, values = self._tables.rows(table).export()
        return keys.numpy(), values.numpy()

    def export_shards(self, table: str) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
        width = self._tables.row_width(table)
        # (the stored rows, and their first ``width`` columns as a view: a table that keeps Adam's m and v beside
        # its rows, embedding/rows_with_state.py, is not copied again to cut them off)
        for shard in self._tables.embeddings[table].params.tables:
            with self.writing:  # (not held while the shard's rows are encoded and sent)
                keys, values = (_view(t) for t in shard.export())
            yield keys, values[:, :width]
            del keys, values

    def lookup(self, keys: Dict[str, np.ndarray]) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
        names = self.names()
        if self._lookup_all is None:
            params = [self._tables.rows(name) for name in names]

            def lookup_all(*all_keys):
                return [table.lookup(k, return_exists=True) for table, k in zip(params, all_keys)]

            signature = [tf.TensorSpec([None], tf.int64)] * len(names)
            self._lookup_all = tf.function(lookup_all, autograph=False).get_concrete_function(*signature)
        empty = np.zeros(0, np.int64)
        found = self._lookup_all(*[tf.constant(keys.get(name, empty)) for name in names])
        return {name: (values.numpy(), exists.numpy()) for name, (values, exists) in zip(names, found)
                if name in keys}


def take_snapshot(tables: TableRows, ids: ParameterIds, step: int, create_time: float, positions: Dict[int, int],
                  dense: Optional[Dict[int, np.ndarray]], trained: Dict[str, List[np.ndarray]],
                  deleted: Dict[str, List[np.ndarray]], full_sync: bool = False,
                  guard: Optional[NonFiniteGuard] = None) -> UpdateSnapshot:
    """Rows of the ``trained`` and ``deleted`` keys (every row when ``full_sync``), and deletes.

    Safe to call while another thread trains: a row read here may be a step
    old, but its key is then recorded again and re-sent with the next update.
    ``guard``: rows and dense parameters with NaN or infinite values are left out and counted.
    With ``full_sync`` every table is held whole: large tables go through ``full_sync_pieces``.
    """
    if guard is not None and dense:
        names = {param_id: name for name, param_id in ids.dense.items()}
        dense = {i: value for i, value in dense.items() if guard.finite_dense(names.get(i, str(i)), value)}
    snapshot = UpdateSnapshot(step, create_time, positions, dense=dense or {}, full_sync=full_sync)
    gone_by_table = {name: unique_keys(deleted.get(name, [])) for name in tables.names()}
    wanted: Dict[str, np.ndarray] = {}
    if not full_sync:
        wanted = {name: unique_keys(trained.get(name, []) + [gone]) for name, gone in gone_by_table.items()}
        wanted = {name: keys for name, keys in wanted.items() if len(keys)}
    found = tables.lookup(wanted) if wanted else {}
    for name, gone_keys in gone_by_table.items():
        table_id = ids.tables[name][0]
        if full_sync:
            keys, values = tables.export(name)
            gone = gone_keys[~np.isin(gone_keys, keys)]
        elif name in wanted:
            keys, values, gone = split_changes(wanted[name], gone_keys, *found[name])
        else:
            continue
        if guard is not None:
            keys, values = guard.finite_rows(name, keys, values)
        if len(keys):
            snapshot.rows[table_id] = (keys, values)
        if len(gone):
            snapshot.deletes[table_id] = gone
    return snapshot


def full_sync_pieces(tables: TableRows, ids: ParameterIds, dense: Optional[Dict[int, np.ndarray]],
                     deleted: Dict[str, List[np.ndarray]], chunk_rows: int, guard: NonFiniteGuard,
                     counts: Dict[str, int]) -> Iterator[Piece]:
    """Every dense parameter and table row, and the deleted keys no table holds, for ``codec.encode_stream``.

    Reads lazily (module docstring): a shard is exported when the encoder reaches it, and its rows are
    yielded in slices of at most ``chunk_rows`` (views, not copies, unless non-finite rows are dropped).
    ``counts`` ("dense", "rows", "deletes") is updated as pieces are yielded. Safe while another thread
    trains: a row read here may be a step old, and a key trained after its shard was read is recorded
    again and sent with the next update.
    """
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows={chunk_rows}: a full sync needs at least one row per chunk")
    names = {param_id: name for name, param_id in ids.dense.items()}
    for param_id, value in sorted((dense or {}).items()):
        if guard.finite_dense(names.get(param_id, str(param_id)), value):
            counts["dense"] = counts.get("dense", 0) + 1
            yield DensePiece(param_id, value)
    for name in tables.names():
        table_id, dim = ids.tables[name]
        gone = unique_keys(deleted.get(name, []))
        held = np.zeros(len(gone), bool)  # deleted keys a shard holds again: not deletes
        for keys, values in tables.export_shards(name):
            for start in range(0, len(keys), chunk_rows):
                chunk_keys, chunk_values = keys[start:start + chunk_rows], values[start:start + chunk_rows]
                if len(gone):
                    held |= np.isin(gone, chunk_keys)
                chunk_keys, chunk_values = guard.finite_rows(name, chunk_keys, chunk_values)
                if len(chunk_keys):
                    counts["rows"] = counts.get("rows", 0) + len(chunk_keys)
                    yield RowsPiece(table_id, chunk_keys, chunk_values)
                del chunk_keys, chunk_values
            del keys, values  # the shard's export is freed before the next one is read
        if (~held).any():
            counts["deletes"] = counts.get("deletes", 0) + int((~held).sum())
            yield DeletesPiece(table_id, dim, gone[~held])
