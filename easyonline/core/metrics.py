"""Prequential (score-then-train) AUC and logloss over a sliding window of samples.

Each batch adds a histogram of its scores (per label) to a ring of batches;
the window's AUC is computed from the summed histograms. This costs O(batch)
per batch and O(buckets) per report, independent of the window length.
"""
import collections
import dataclasses
from typing import Deque, Dict, Optional, Protocol, Tuple

import numpy as np

_EPS = 1e-7


def auc_from_histograms(pos: np.ndarray, neg: np.ndarray) -> Optional[float]:
    """AUC from per-bucket counts of positive and negative scores (ties count half)."""
    total_pos, total_neg = pos.sum(), neg.sum()
    if total_pos == 0 or total_neg == 0:
        return None
    neg_below = np.cumsum(neg) - neg
    return float((pos * (neg_below + 0.5 * neg)).sum() / (total_pos * total_neg))


@dataclasses.dataclass
class _BatchStats:
    pos: np.ndarray
    neg: np.ndarray
    count: int
    logloss_sum: float
    label_sum: float


class WindowMetrics(Protocol):
    """What the status line and callbacks read of the prequential metrics (one process's or a cluster's)."""

    def auc(self) -> Optional[float]:
        """AUC over the window, None before both labels were seen."""

    def logloss(self) -> Optional[float]:
        """Mean logloss over the window, None when empty."""

    def ctr(self) -> Optional[float]:
        """Share of positive labels over the window, None when empty."""


class WindowFigures(Protocol):
    """What readers take of a task's windowed metrics (one process's, or a cluster's shared ones)."""

    window_samples: int

    def figures(self) -> Dict[str, Optional[float]]:
        """Its figures over the window by name (``auc``, ``logloss``, ``ctr``; ``mse``, ``label_mean``)."""


class TaskMetrics(WindowFigures, Protocol):
    """A task's windowed metrics, by name, for the status line, the summary, /metrics and TensorBoard."""

    def update(self, labels: np.ndarray, predictions: np.ndarray) -> None:
        """Adds a batch scored before it was trained on."""


class PrequentialMetrics:
    """Windowed AUC / logloss / CTR, plus totals since start."""

    def __init__(self, window_samples: int = 100000, buckets: int = 10000):
        self.window_samples = window_samples
        self.buckets = buckets
        self._ring: Deque[_BatchStats] = collections.deque()
        self._pos = np.zeros(buckets, np.int64)
        self._neg = np.zeros(buckets, np.int64)
        self._count = 0
        self._logloss = 0.0
        self._labels = 0.0
        self.total_samples = 0
        self.total_logloss = 0.0

    def update(self, labels: np.ndarray, probs: np.ndarray) -> None:
        labels = np.asarray(labels, np.float64).reshape(-1)
        probs = np.clip(np.asarray(probs, np.float64).reshape(-1), _EPS, 1 - _EPS)
        index = np.minimum((probs * self.buckets).astype(np.int64), self.buckets - 1)
        positive = labels > 0.5
        pos = np.bincount(index[positive], minlength=self.buckets)
        neg = np.bincount(index[~positive], minlength=self.buckets)
        logloss = float(-(labels * np.log(probs) + (1 - labels) * np.log(1 - probs)).sum())
        stats = _BatchStats(pos, neg, len(labels), logloss, float(labels.sum()))
        self._ring.append(stats)
        self._add(stats, 1)
        while self._count - self._ring[0].count >= self.window_samples:
            self._add(self._ring.popleft(), -1)
        self.total_samples += len(labels)
        self.total_logloss += logloss

    def _add(self, stats: _BatchStats, sign: int) -> None:
        self._pos += sign * stats.pos
        self._neg += sign * stats.neg
        self._count += sign * stats.count
        self._logloss += sign * stats.logloss_sum
        self._labels += sign * stats.label_sum

    @property
    def window_count(self) -> int:
        return self._count

    def auc(self) -> Optional[float]:
        return auc_from_histograms(self._pos, self._neg)

    def logloss(self) -> Optional[float]:
        return self._logloss / self._count if self._count else None

    def ctr(self) -> Optional[float]:
        return self._labels / self._count if self._count else None

    def figures(self) -> Dict[str, Optional[float]]:
        return {"auc": self.auc(), "logloss": self.logloss(), "ctr": self.ctr()}


class RegressionMetrics:
    """Windowed mean squared error and mean label of a regression task (score-then-train)."""

    def __init__(self, window_samples: int = 100000):
        self.window_samples = window_samples
        self._ring: Deque[Tuple[int, float, float]] = collections.deque()  # (count, squared error sum, label sum)
        self._count = 0
        self._squared = 0.0
        self._labels = 0.0
        self.total_samples = 0
        self.total_squared_error = 0.0

    def update(self, labels: np.ndarray, predictions: np.ndarray) -> None:
        labels = np.asarray(labels, np.float64).reshape(-1)
        errors = np.asarray(predictions, np.float64).reshape(-1) - labels
        stats = (len(labels), float(np.square(errors).sum()), float(labels.sum()))
        self._ring.append(stats)
        self._add(stats, 1)
        while self._count - self._ring[0][0] >= self.window_samples:
            self._add(self._ring.popleft(), -1)
        self.total_samples += stats[0]
        self.total_squared_error += stats[1]

    def _add(self, stats: Tuple[int, float, float], sign: int) -> None:
        self._count += sign * stats[0]
        self._squared += sign * stats[1]
        self._labels += sign * stats[2]

    @property
    def window_count(self) -> int:
        return self._count

    def mse(self) -> Optional[float]:
        return self._squared / self._count if self._count else None

    def label_mean(self) -> Optional[float]:
        return self._labels / self._count if self._count else None

    def figures(self) -> Dict[str, Optional[float]]:
        return {"mse": self.mse(), "label_mean": self.label_mean()}
