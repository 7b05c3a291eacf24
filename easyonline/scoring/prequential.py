"""Prequential figures of a stream: what each task predicted for a sample before training on it, judged on halves.

The quality benches (tools/bench/*_quality.py) each judged a config this way and took the pieces from one
another's scripts; they are one utility, here and in easyonline/tools/prequential.py (which trains a config
on a stream with a ``TaskRecorder``): ``TaskRecorder`` keeps what each task predicted for every sample before
learning it, ``halves`` gives a metric over the whole stream, its first half (where settings are chosen) and
its second (where they are judged), and ``item_mean_baseline`` is the running per-item mean a rating task is
judged against.
"""
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from easyonline.core.callbacks import Callback


def halves(metric: Callable[[np.ndarray, np.ndarray], float], labels: np.ndarray, predictions: np.ndarray,
           half: int) -> Dict[str, float]:
    """``metric`` over the whole stream, its first half (for choosing settings) and its second (judged)."""
    return {"overall": metric(labels, predictions), "first_half": metric(labels[:half], predictions[:half]),
            "second_half": metric(labels[half:], predictions[half:])}


def mean_halves(runs: List[Dict[str, float]]) -> Dict[str, float]:
    """The mean of each figure over several runs (seeds) of ``halves``."""
    return {key: float(np.mean([run[key] for run in runs])) for key in runs[0]}


def item_mean_baseline(items: Sequence[str], ratings: np.ndarray, prior: float = 3.0) -> np.ndarray:
    """Online per-item running mean: each rating predicted by its item's mean rating so far (the mean of
    every rating so far for an unseen item; ``prior`` before any), then learned."""
    sums: Dict[str, float] = {}
    counts: Dict[str, int] = {}
    total, seen = 0.0, 0
    predictions = np.empty(len(items))
    for i, (item, rating) in enumerate(zip(items, ratings)):
        count = counts.get(item, 0)
        predictions[i] = sums[item] / count if count else (total / seen if seen else prior)
        sums[item] = sums.get(item, 0.0) + rating
        counts[item] = count + 1
        total += rating
        seen += 1
    return predictions


class _RecordingMetrics:
    """A task's metrics: records every (labels, predictions) the trainer adds, then passes them on."""

    def __init__(self, inner: Any, labels: List[np.ndarray], predictions: List[np.ndarray]):
        self._inner, self._labels, self._predictions = inner, labels, predictions

    def update(self, labels, predictions) -> None:
        self._labels.append(np.asarray(labels, np.float64).reshape(-1))
        self._predictions.append(np.asarray(predictions, np.float64).reshape(-1))
        self._inner.update(labels, predictions)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class TaskRecorder(Callback):
    """Keeps every task's pre-update predictions and labels, by task name (what the trainer hands the task's
    metrics after scoring a batch, before training on it); stops the trainer after ``total`` samples."""

    def __init__(self, total: int):
        self.total = total
        self.labels: Dict[str, List[np.ndarray]] = {}
        self.predictions: Dict[str, List[np.ndarray]] = {}
        self.seen = 0
        self.first_batch: Optional[Tuple[float, int]] = None  # when the first batch ended, its samples
        self.last_batch_at = 0.0

    def on_train_begin(self, trainer) -> None:
        for task in trainer.model.tasks:
            self.labels[task.name], self.predictions[task.name] = [], []
            task.metrics = _RecordingMetrics(task.metrics, self.labels[task.name], self.predictions[task.name])

    def on_batch_end(self, trainer, raw_batch, parsed_batch, probs) -> None:
        self.seen += len(np.asarray(probs).reshape(-1))
        self.last_batch_at = time.perf_counter()
        if self.first_batch is None:
            self.first_batch = (self.last_batch_at, self.seen)
        if self.seen >= self.total:
            trainer.stop("the whole stream was trained")

    def samples_per_sec(self) -> float:
        """Training throughput from the end of the first batch (the model built, the graph traced) to the last."""
        if self.first_batch is None or self.last_batch_at <= self.first_batch[0]:
            return float("nan")
        return (self.seen - self.first_batch[1]) / (self.last_batch_at - self.first_batch[0])

    def task(self, name: str) -> Tuple[np.ndarray, np.ndarray]:
        """(labels, predictions) of task ``name`` over the whole stream."""
        if name not in self.labels:
            raise KeyError(f"the model has no task {name!r}; its tasks: {sorted(self.labels)}")
        return np.concatenate(self.labels[name]), np.concatenate(self.predictions[name])
