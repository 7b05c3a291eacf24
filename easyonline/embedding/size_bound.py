"""Keeping every table with an eviction ``max_size`` within its bound between scheduled shrinks.

A scheduled shrink (eviction.py) caps a table only when it runs: a trainer
fast between shrinks grew 26 tables of ``max_size`` 200 to 3,500 rows each,
and its last checkpoint and export held them all. So the training loop also
trims (``shrink_table(cap_only=True)``: the shrink's ranking, no decay, no
delete rules):

- after a step, a table whose rows exceed ``ceiling(max_size)`` (max_size
  plus ``SLACK``), or whose statistics exceed ``ceiling(STATS_PER_ROW x
  max_size)``, goes back to max_size (and STATS_PER_ROW x max_size);
- before every checkpoint and base/delta save (``exact``), every table above
  max_size goes back to it, so what is saved and exported holds at most
  max_size rows.

Why a slack: a trim reads the whole table, O(rows); trimming at max_size
itself would do so at almost every step. With 10 % slack a table is trimmed
at most once per max_size / 10 new rows.

Why a headroom: a table's size is O(1) to read, but 26 eager TFRA size()
calls take several milliseconds, too much for every step. A batch adds at
most as many rows (and statistics) to a table as it has ids of its features,
so after each reading the loop keeps each table's headroom below its
ceilings and subtracts every batch's ids; it reads the sizes again only once
a headroom is spent. In one process the bound then holds after every step.
A cluster's chief sees only its own batches: it counts each as ``trainers``
batches, an estimate (the other trainers' steps are not seen), so a
cluster's tables may pass the ceiling between the chief's checks; the trim
before each checkpoint holds, up to the rows the other trainers add while
the chief saves.
"""
from typing import Dict, List, Mapping, Tuple

import numpy as np

from easyonline.embedding.eviction import STATS_PER_ROW
from easyonline.features.feature_spec import FeatureSpecs

SLACK = 0.1  # a table may hold max_size x (1 + SLACK) rows between trims (at least one row more)

Sizes = Dict[str, Tuple[int, int]]  # table -> (rows, statistics)


def ceiling(limit: int) -> int:
    """The most a table bounded by ``limit`` holds between trims."""
    return limit + max(int(limit * SLACK), 1)


def _ids_in(ids) -> int:
    """How many ids a feature of a batch holds (a tensor, ragged tensor or array; no device read)."""
    flat = ids.flat_values if hasattr(ids, "flat_values") else ids
    return int(np.prod(tuple(flat.shape)))


class SizeBounds:
    """The tables with a ``max_size``, their headroom, and which of them a trim is due for."""

    def __init__(self, specs: FeatureSpecs, trainers: int = 1):
        self.limits: Dict[str, int] = {name: int(table.eviction.max_size) for name, table in specs.tables.items()
                                       if table.eviction is not None and table.eviction.max_size}
        self._features = [(f.name, f.table) for f in specs.id_features if f.table in self.limits]
        self._trainers = max(trainers, 1)
        self._headroom: Dict[str, int] = {}  # empty: unknown, read the sizes at the next check

    def __bool__(self) -> bool:
        return bool(self.limits)

    def count(self, features: Mapping[str, object]) -> bool:
        """Subtracts a trained batch's ids from each table's headroom; True when a table may have passed
        a ceiling (read the sizes)."""
        if not self._headroom:
            return bool(self.limits)
        for name, table in self._features:
            self._headroom[table] -= _ids_in(features[name]) * self._trainers
        return any(room < 0 for room in self._headroom.values())

    def over(self, sizes: Sizes, exact: bool = False) -> List[str]:
        """The tables to trim: above a ceiling, or with ``exact`` above max_size (rows or statistics)."""
        bound = (lambda limit: limit) if exact else ceiling
        return [table for table, (rows, stats) in sizes.items()
                if rows > bound(self.limits[table]) or stats > bound(STATS_PER_ROW * self.limits[table])]

    def measured(self, sizes: Sizes) -> None:
        """Sets each table's headroom from sizes just read (after the trims)."""
        self._headroom = {table: min(ceiling(self.limits[table]) - rows,
                                     ceiling(STATS_PER_ROW * self.limits[table]) - stats)
                          for table, (rows, stats) in sizes.items()}
