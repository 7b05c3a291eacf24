"""Reads the rows an update (or a base/delta save) carries, as they are in the tables now."""
from typing import Dict, List, Optional, Protocol, Tuple

import numpy as np

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.embedding.change_tracker import split_changes, unique_keys
from easyonline.updates.param_ids import ParameterIds
from easyonline.updates.codec import UpdateSnapshot

tf = ensure_legacy_keras()


class TableRows(Protocol):
    """Reads a trainer's tables: eagerly in one process, through the session on a cluster's chief."""

    def names(self) -> List[str]:
        ...

    def export(self, table: str) -> Tuple[np.ndarray, np.ndarray]:
        """Every (key, row) of ``table``."""

    def lookup(self, table: str, keys: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """(rows, exists) of ``keys``."""


class EagerTableRows:
    """TableRows of a single process's tables (embedding.dynamic_tables.DynamicTables)."""

    def __init__(self, tables):
        self._tables = tables

    def names(self) -> List[str]:
        return list(self._tables.embeddings)

    def export(self, table: str) -> Tuple[np.ndarray, np.ndarray]:
        keys, values = self._tables.embeddings[table].params.export()
        return keys.numpy(), values.numpy()

    def lookup(self, table: str, keys: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        values, exists = self._tables.embeddings[table].params.lookup(tf.constant(keys), return_exists=True)
        return values.numpy(), exists.numpy()


def take_snapshot(tables: TableRows, ids: ParameterIds, step: int, create_time: float, positions: Dict[int, int],
                  dense: Optional[Dict[int, np.ndarray]], trained: Dict[str, List[np.ndarray]],
                  deleted: Dict[str, List[np.ndarray]], full_sync: bool = False) -> UpdateSnapshot:
    """Rows of the ``trained`` and ``deleted`` keys (every row when ``full_sync``), and deletes.

    Safe to call while another thread trains: a row read here may be a step
    old, but its key is then recorded again and re-sent with the next update.
    """
    snapshot = UpdateSnapshot(step, create_time, positions, dense=dense or {}, full_sync=full_sync)
    for name in tables.names():
        table_id = ids.tables[name][0]
        gone_keys = unique_keys(deleted.get(name, []))
        if full_sync:
            keys, values = tables.export(name)
            gone = gone_keys[~np.isin(gone_keys, keys)]
        else:
            keys = unique_keys(trained.get(name, []) + [gone_keys])
            if not len(keys):
                continue
            values, exists = tables.lookup(name, keys)
            keys, values, gone = split_changes(keys, gone_keys, values, exists)
        if len(keys):
            snapshot.rows[table_id] = (keys, values)
        if len(gone):
            snapshot.deletes[table_id] = gone
    return snapshot
