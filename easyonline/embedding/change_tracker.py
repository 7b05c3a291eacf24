"""Which keys of each table changed (trained or evicted) since a subscriber last looked.

Recording must be nearly free on the training thread, so a batch only
appends its id arrays; deduplication happens later on the publisher's
thread. Whether a key becomes a row or a delete is decided when the update
is read (``split_changes``): a key that is in the table now is sent with its
current value, a key that was deleted and is not back is sent as a delete,
and a key that was trained but never admitted is not sent at all. That
rule needs no ordering between trains and deletes.
"""
import threading
from typing import Any, Callable, Dict, List, Mapping, Tuple

import numpy as np

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.features.feature_spec import FeatureSpecs

tf = ensure_legacy_keras()

_EMPTY = np.zeros(0, np.int64)


# A log merges its arrays into distinct keys once they hold this many ids, or twice the distinct keys
# of its last merge if that is more: its memory stays within a few times the distinct keys it holds.
MERGE_AT_IDS = 1_000_000


class ChangeLog:
    """One subscriber's view: the trained and deleted keys per table since its last ``drain``.

    Memory is bounded by the distinct keys changed since the last drain, not
    by the batches: while nobody drains (a publisher whose sink is down), the
    arrays are merged into distinct keys every ``MERGE_AT_IDS`` ids or so.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._trained: Dict[str, List[np.ndarray]] = {}
        self._deleted: Dict[str, List[np.ndarray]] = {}
        self._count = 0
        self._merge_at = 0
        self.merges = 0

    def add(self, trained: List[Tuple[str, np.ndarray]], deleted: List[Tuple[str, np.ndarray]]) -> None:
        """Records (table, ids) arrays, as they are (the tracker shares them between logs)."""
        with self._lock:
            for target, arrays in ((self._trained, trained), (self._deleted, deleted)):
                for table, ids in arrays:
                    target.setdefault(table, []).append(ids)
                    self._count += len(ids)
            if self._count >= max(self._merge_at, MERGE_AT_IDS):
                self._merge()

    def _merge(self) -> None:
        """Replaces each table's arrays by its distinct keys (called with the lock held)."""
        for target in (self._trained, self._deleted):
            for table, arrays in target.items():
                target[table] = [unique_keys(arrays)]
        self._count = sum(len(a[0]) for target in (self._trained, self._deleted) for a in target.values())
        self._merge_at = 2 * self._count
        self.merges += 1

    @property
    def pending_ids(self) -> int:
        """Ids recorded since the last drain (with repeats until merged): a cheap gauge of the next update's size."""
        return self._count

    def drain(self) -> Tuple[Dict[str, List[np.ndarray]], Dict[str, List[np.ndarray]]]:
        """Hands over everything recorded so far and starts afresh."""
        with self._lock:
            trained, deleted = self._trained, self._deleted
            self._trained, self._deleted, self._count = {}, {}, 0
            self._merge_at = 0
        return trained, deleted


class ChangeTracker:
    """Records every trained batch's ids and every eviction's keys once, for all its subscribers.

    The trainer owns one and feeds it once per batch; incremental publishing
    and base/delta saves each ``subscribe`` and drain their own ChangeLog on
    their own schedule. The id arrays are shared between the logs, not copied.
    With no subscriber, recording costs nothing.
    """

    def __init__(self, specs: FeatureSpecs):
        self._feature_tables = [(f.name, f.table) for f in specs.id_features]
        self._logs: List[ChangeLog] = []

    def subscribe(self) -> ChangeLog:
        log = ChangeLog()
        self._logs.append(log)
        return log

    def record_batch(self, features: Mapping[str, Any]) -> None:
        """The ids of a trained batch: tensors (ragged ones too) or numpy arrays, by feature."""
        if not self._logs:
            return
        arrays = []
        for name, table in self._feature_tables:
            ids = features[name]
            if isinstance(ids, tf.RaggedTensor) or hasattr(ids, "flat_values"):  # (the array path's RaggedArray)
                ids = ids.flat_values
            arrays.append((table, np.asarray(ids)))
        for log in self._logs:
            log.add(arrays, [])

    def record_deleted(self, evicted: Dict[str, np.ndarray]) -> None:
        arrays = [(table, np.asarray(keys, np.int64)) for table, keys in evicted.items()]
        for log in self._logs:
            log.add([], arrays)


class PulledChangeTracker(ChangeTracker):
    """Changes recorded elsewhere, pulled on demand: a cluster's trainers record their trained keys on
    the ps, and the chief's subscribers drain them from there.

    ``pull`` returns {table: keys} and forgets them; every subscriber's drain
    first pulls into every log, so two subscribers each see every key.
    """

    def __init__(self, pull: Callable[[], Dict[str, np.ndarray]]):  # pylint: disable=super-init-not-called
        self._logs: List[ChangeLog] = []
        self._pull = pull
        self._pull_lock = threading.Lock()

    def subscribe(self) -> ChangeLog:
        log = _PullingLog(self)
        self._logs.append(log)
        return log

    def record_batch(self, features) -> None:
        """Nothing to do: the keys are recorded with each step, where the tables are."""

    def pull_into_logs(self) -> None:
        with self._pull_lock:
            arrays = [(table, np.asarray(keys, np.int64)) for table, keys in self._pull().items() if len(keys)]
            for log in self._logs:
                log.add(arrays, [])


class _PullingLog(ChangeLog):
    def __init__(self, tracker: PulledChangeTracker):
        super().__init__()
        self._tracker = tracker

    def drain(self) -> Tuple[Dict[str, List[np.ndarray]], Dict[str, List[np.ndarray]]]:
        self._tracker.pull_into_logs()
        return super().drain()


def unique_keys(arrays: List[np.ndarray]) -> np.ndarray:
    if not arrays:
        return _EMPTY
    keys = np.unique(np.concatenate(arrays).astype(np.int64, copy=False))
    return keys[keys >= 0]  # negative ids are padding: never rows


def split_changes(keys: np.ndarray, deleted: np.ndarray, values: np.ndarray, exists: np.ndarray):
    """(row keys, row values, delete keys) from the table's current state for ``keys``."""
    gone = keys[~exists]
    return keys[exists], values[exists], gone[np.isin(gone, deleted)]
