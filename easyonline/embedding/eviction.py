"""Eviction (Paddle's shrink): decay statistics, then drop stale, low-score and over-cap rows.

An evicted id leaves the table, every optimizer slot and the statistics. A
never-admitted id whose statistics meet a delete rule leaves the statistics;
with ``max_size``, at most 4 x max_size ids keep statistics.
"""
import logging
from typing import Dict, Protocol, Tuple

import numpy as np

from easyonline.embedding.admission import show_click_score
from easyonline.embedding.dynamic_tables import CLICK, LAST_SEEN, SHOW, DynamicTables

log = logging.getLogger(__name__)
STATS_PER_ROW = 4


class TableOps(Protocol):
    """Reads and writes a TFRA table (de.Variable): eagerly in one process, through a cluster's session."""

    def export(self, variable) -> Tuple[np.ndarray, np.ndarray]:
        ...

    def remove(self, variable, keys: np.ndarray) -> None:
        ...

    def upsert(self, variable, keys: np.ndarray, values: np.ndarray) -> None:
        ...


class EagerTableOps:
    """TableOps of a single process's tables."""

    def export(self, variable) -> Tuple[np.ndarray, np.ndarray]:
        keys, values = variable.export()
        return keys.numpy(), values.numpy()

    def remove(self, variable, keys: np.ndarray) -> None:
        if len(keys):
            variable.remove(keys)

    def upsert(self, variable, keys: np.ndarray, values: np.ndarray) -> None:
        variable.upsert(keys, values)


def shrink_table(tables: DynamicTables, table: str, now: float, seconds_per_day: float,
                 ops: TableOps = EagerTableOps(), cap_only: bool = False) -> np.ndarray:
    """Applies the table's eviction config; returns the evicted keys that had rows.

    ``cap_only``: only ``max_size`` (rows, and statistics at STATS_PER_ROW x max_size), without the decay
    and the delete rules: the trim that keeps a table within its bound between scheduled shrinks
    (size_bound.py). Decay is per scheduled shrink, so a trim that ran as often as the table grows must not
    decay; the ranking is the same as a shrink's.
    """
    policy = tables.table_spec(table).eviction
    stats = tables.statistics[table]
    keys, values = ops.export(stats)
    if cap_only:
        score = show_click_score(values[:, SHOW], values[:, CLICK], policy.nonclk_coeff, policy.click_coeff)
        delete = np.zeros(len(keys), bool)
    else:
        values = values.copy()
        values[:, SHOW] *= policy.show_click_decay_rate
        values[:, CLICK] *= policy.show_click_decay_rate
        score = show_click_score(values[:, SHOW], values[:, CLICK], policy.nonclk_coeff, policy.click_coeff)
        delete = score < policy.delete_threshold
        if policy.delete_after_unseen_days > 0:
            delete |= (now - values[:, LAST_SEEN]) > policy.delete_after_unseen_days * seconds_per_day
    layer = tables.embeddings[table]
    row_keys = ops.export(layer.params)[0]
    if policy.max_size and len(row_keys) > policy.max_size:
        # Rank the surviving rows by score, then recency; ids without statistics rank last.
        index = _positions_in(keys, row_keys)
        has = index >= 0
        safe = np.where(has, index, 0)  # any valid index where a row has no statistics (masked out below)
        row_score = np.where(has, score[safe], -np.inf) if len(keys) else np.full(len(row_keys), -np.inf)
        row_seen = np.where(has, values[safe, LAST_SEEN], -np.inf) if len(keys) else np.full(len(row_keys), -np.inf)
        row_deleted = np.where(has, delete[safe], False) if len(keys) else np.zeros(len(row_keys), bool)
        row_score = np.where(row_deleted, -np.inf, row_score)
        order = np.lexsort((-row_seen, -row_score))  # best first
        over_cap = row_keys[order[policy.max_size:]]
        delete |= np.isin(keys, over_cap)
        extra = over_cap[~np.isin(over_cap, keys)]
    else:
        extra = np.zeros(0, np.int64)
    if policy.max_size:
        # Statistics of never-admitted ids are capped too (at STATS_PER_ROW x max_size ids), or an
        # endless stream of one-off ids would grow them without bound: lowest score, then oldest, go first.
        without_row = ~delete & ~np.isin(keys, row_keys)
        room = STATS_PER_ROW * policy.max_size - int((~delete).sum() - without_row.sum())
        candidates = np.flatnonzero(without_row)
        if len(candidates) > max(room, 0):
            order = np.lexsort((-values[candidates, LAST_SEEN], -score[candidates]))
            delete[candidates[order[max(room, 0):]]] = True
    doomed = np.concatenate([keys[delete], extra])
    evicted = row_keys[np.isin(row_keys, doomed)]
    ops.remove(layer.params, evicted)
    for slot in tables.slot_variables(table):
        ops.remove(slot, evicted)
    ops.remove(stats, keys[delete])
    keep = ~delete
    if keep.any() and not cap_only:  # (a trim changed no value: nothing to write back)
        ops.upsert(stats, keys[keep], values[keep])
    return evicted


def _positions_in(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The index of each of ``wanted`` in ``keys`` (distinct), -1 where absent; vectorised, as a trim runs
    whenever a table outgrows its slack and a Python loop over a million keys takes a second."""
    if not len(keys):
        return np.full(len(wanted), -1, np.int64)
    order = np.argsort(keys, kind="stable")
    at = np.minimum(np.searchsorted(keys[order], wanted), len(keys) - 1)
    return np.where(keys[order][at] == wanted, order[at], -1).astype(np.int64)


def shrink_tables(tables: DynamicTables, now: float, seconds_per_day: float,
                  ops: TableOps = EagerTableOps()) -> Dict[str, np.ndarray]:
    """Shrinks every table that has an eviction config; ``now`` is seconds since STATS_EPOCH."""
    return {table: shrink_table(tables, table, now, seconds_per_day, ops)
            for table in tables.embeddings if tables.table_spec(table).eviction is not None}
