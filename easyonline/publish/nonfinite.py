"""Keeps NaN and infinite values out of what the trainer publishes or saves.

Every reader refuses a whole message that carries a NaN or infinite value
(updates/apply_rules.py), so one diverged row would stop serving from taking
any later update. The trainer therefore checks before it encodes:
- an embedding row with a non-finite value is not published (nor saved in a
  base or delta); its readers keep the row they had (after a full sync, which
  does not carry it, they drop it);
- a dense parameter with a non-finite value is left out whole (its slices
  could not be applied one without the other); readers keep the previous
  value, and the error is logged loudly: the model has diverged.
Both are counted (``NonFiniteGuard.rows`` / ``.dense``, by table or parameter
name) and logged at most once per ``log_every_secs`` (``maybe_log``, which
the publisher calls after each update and the saves after each save), naming
the tables and parameters and how many since the previous line.
"""
import logging
import time
from typing import Dict, Tuple

import numpy as np

log = logging.getLogger(__name__)


class NonFiniteGuard:
    """Filters rows and dense values before encoding; counts and logs what it left out."""

    def __init__(self, what: str, log_every_secs: float = 60.0):
        self.what = what  # "published" or "saved", for the log line
        self.log_every_secs = log_every_secs
        self.rows: Dict[str, int] = {}   # table name -> rows left out, since start
        self.dense: Dict[str, int] = {}  # dense parameter name -> times left out, since start
        self._pending_rows: Dict[str, int] = {}
        self._pending_dense: Dict[str, int] = {}
        self._next_log = 0.0

    @property
    def total(self) -> int:
        return sum(self.rows.values()) + sum(self.dense.values())

    def finite_rows(self, table: str, keys: np.ndarray, values: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """The (keys, values) whose row is all finite; counts the others under ``table``."""
        if not len(keys):
            return keys, values
        finite = np.isfinite(values).all(axis=1)
        if finite.all():
            return keys, values
        dropped = int(len(finite) - finite.sum())
        self.rows[table] = self.rows.get(table, 0) + dropped
        self._pending_rows[table] = self._pending_rows.get(table, 0) + dropped
        return keys[finite], values[finite]

    def finite_dense(self, name: str, value: np.ndarray) -> bool:
        """True when ``value`` is all finite; else counts it under ``name``."""
        if np.isfinite(value).all():
            return True
        self.dense[name] = self.dense.get(name, 0) + 1
        self._pending_dense[name] = self._pending_dense.get(name, 0) + 1
        return False

    def maybe_log(self, force: bool = False) -> None:
        """Logs what was left out since the last line, at most once per ``log_every_secs`` (or now: ``force``)."""
        now = time.time()
        if not (self._pending_rows or self._pending_dense) or (now < self._next_log and not force):
            return
        self._next_log = now + self.log_every_secs
        if self._pending_rows:
            tables = ", ".join(f"{name}: {count}" for name, count in sorted(self._pending_rows.items()))
            log.warning("embedding rows with NaN or infinite values not %s (%s; %d since start)", self.what, tables,
                        sum(self.rows.values()))
        if self._pending_dense:
            names = ", ".join(f"{name} ({count}x)" for name, count in sorted(self._pending_dense.items()))
            log.error("dense parameters with NaN or infinite values not %s: %s. Readers keep their previous "
                      "values; the model has diverged (lower the learning rate, check the input)", self.what, names)
        self._pending_rows, self._pending_dense = {}, {}
