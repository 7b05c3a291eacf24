"""AUC (and RMSE) over a whole stream and over windows of it, and a plot of those windows.

The learning-quality benchmarks and the demo draw the same picture: the
prequential AUC of the online model over the stream, against a copy frozen
at some point (and a baseline); the multi-task benchmark adds a panel of a
regression task's windowed RMSE. The AUC here is exact (ties count one
half), unlike the histogram AUC of the status line, because the curves are
compared to within a few thousandths.
"""
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np

Curve = Tuple[List[int], List[float]]
#: one panel of a plot: (its y axis label, its curves by legend label)
Panel = Tuple[str, Dict[str, Curve]]


def exact_auc(labels: Sequence[float], scores: Sequence[float]) -> float:
    """ROC AUC of ``scores`` for binary ``labels``; NaN when one class is missing."""
    positive = np.asarray(labels) > 0.5
    _, inverse, counts = np.unique(np.asarray(scores), return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    ranks = (ends - (counts - 1) / 2.0)[inverse]  # the average rank of each tie group
    positives = int(positive.sum())
    negatives = len(positive) - positives
    if not positives or not negatives:
        return float("nan")
    return float((ranks[positive].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def rmse(labels: Sequence[float], predictions: Sequence[float]) -> float:
    """Root mean squared error; NaN for no samples."""
    errors = np.asarray(predictions, np.float64) - np.asarray(labels, np.float64)
    return float(np.sqrt(np.mean(np.square(errors)))) if len(errors) else float("nan")


def windowed(metric: Callable[[np.ndarray, np.ndarray], float], labels: np.ndarray, scores: np.ndarray,
             window: int, step: int, start: int = 0) -> Curve:
    """(end positions, ``metric`` of the ``window`` samples before each), one point every ``step`` samples
    after ``start + window`` (``labels`` and ``scores`` both cover the whole stream)."""
    ends = list(range(start + window, len(labels) + 1, step))
    return ends, [metric(labels[e - window:e], scores[e - window:e]) for e in ends]


def windowed_auc(labels: np.ndarray, scores: np.ndarray, window: int, step: int, start: int = 0) -> Curve:
    """(end positions, AUC of the ``window`` samples before each), one point every ``step`` samples after
    ``start + window``."""
    return windowed(exact_auc, labels, scores, window, step, start)


def windowed_rmse(labels: np.ndarray, predictions: np.ndarray, window: int, step: int, start: int = 0) -> Curve:
    """As ``windowed_auc``, the RMSE of each window."""
    return windowed(rmse, labels, predictions, window, step, start)


def plot_auc_curves(path: str, curves: Dict[str, Curve], marker_at: int, marker_label: str, title: str) -> None:
    """Writes a PNG of the curves, with a dotted line at ``marker_at``. Needs matplotlib (a dev dependency)."""
    plot_panels(path, [("AUC of the last window (prequential)", curves)], marker_at, marker_label, title)


def plot_panels(path: str, panels: Sequence[Panel], marker_at: int, marker_label: str, title: str) -> None:
    """Writes a PNG of one panel per entry of ``panels``, stacked, sharing the x axis (samples of the
    stream), each with a dotted line at ``marker_at``. Needs matplotlib (a dev dependency)."""
    try:
        import matplotlib  # pylint: disable=g-import-not-at-top
    except ImportError as e:
        raise ImportError("plotting AUC curves needs matplotlib (pip install -r requirements-dev.txt)") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
    figure, grid = plt.subplots(len(panels), 1, figsize=(9, 4.5 * len(panels)), sharex=True, squeeze=False)
    for axes, (ylabel, curves) in zip(grid[:, 0], panels):
        for label, (x, y) in curves.items():
            axes.plot(x, y, label=label, linewidth=1.5)
        axes.axvline(marker_at, color="grey", linestyle=":", linewidth=1)
        if marker_at > sum(axes.get_xlim()) / 2:  # (the label goes left of the line, to fit in the axes)
            text, align = "\n".join(line + " " for line in marker_label.split("\n")), "right"
        else:
            text, align = "\n".join(" " + line for line in marker_label.split("\n")), "left"
        axes.text(marker_at, axes.get_ylim()[0], text, color="grey", va="bottom", ha=align, multialignment=align)
        axes.set_ylabel(ylabel)
        axes.grid(alpha=0.3)
        axes.legend(loc="best")
    grid[0, 0].set_title(title)
    grid[-1, 0].set_xlabel("samples of the stream")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
