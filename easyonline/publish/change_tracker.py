"""Which keys of each table changed since the last sparse publish.

Recording must be nearly free on the training thread, so a batch only
appends its id arrays; deduplication happens later on the publisher's
thread. Whether a key becomes a row or a delete is decided when the update
is read (``split_changes``): a key that is in the table now is sent with its
current value, a key that was deleted and is not back is sent as a delete,
and a key that was trained but never admitted is not sent at all. That
rule needs no ordering between trains and deletes.
"""
import threading
from typing import Dict, List, Tuple

import numpy as np

from easyonline import ensure_legacy_keras
from easyonline.features.feature_spec import FeatureSpecs

tf = ensure_legacy_keras()

_EMPTY = np.zeros(0, np.int64)


class ChangeTracker:
    """Accumulates trained and deleted keys per table until ``drain``."""

    def __init__(self, specs: FeatureSpecs):
        self._feature_tables = [(f.name, f.table) for f in specs.id_features]
        self._lock = threading.Lock()
        self._trained: Dict[str, List[np.ndarray]] = {}
        self._deleted: Dict[str, List[np.ndarray]] = {}
        self._count = 0

    def record_batch(self, features: Dict[str, tf.Tensor]) -> None:
        arrays = []
        for name, table in self._feature_tables:
            ids = features[name]
            if isinstance(ids, tf.RaggedTensor):
                ids = ids.flat_values
            arrays.append((table, ids.numpy()))
        with self._lock:
            for table, ids in arrays:
                self._trained.setdefault(table, []).append(ids)
                self._count += len(ids)

    def record_deleted(self, table: str, keys: np.ndarray) -> None:
        with self._lock:
            self._deleted.setdefault(table, []).append(np.asarray(keys, np.int64))
            self._count += len(keys)

    @property
    def pending_ids(self) -> int:
        """Ids recorded since the last drain (with repeats): a cheap gauge of the next update's size."""
        return self._count

    def drain(self) -> Tuple[Dict[str, List[np.ndarray]], Dict[str, List[np.ndarray]]]:
        """Hands over everything recorded so far and starts afresh."""
        with self._lock:
            trained, deleted = self._trained, self._deleted
            self._trained, self._deleted, self._count = {}, {}, 0
        return trained, deleted


def unique_keys(arrays: List[np.ndarray]) -> np.ndarray:
    if not arrays:
        return _EMPTY
    keys = np.unique(np.concatenate(arrays).astype(np.int64, copy=False))
    return keys[keys >= 0]  # negative ids are padding: never rows


def split_changes(keys: np.ndarray, deleted: np.ndarray, values: np.ndarray, exists: np.ndarray):
    """(row keys, row values, delete keys) from the table's current state for ``keys``."""
    gone = keys[~exists]
    return keys[exists], values[exists], gone[np.isin(gone, deleted)]
