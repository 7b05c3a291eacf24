"""AUC over a whole stream and over windows of it, and a plot of those windows.

The learning-quality benchmark and the demo draw the same picture: the
prequential AUC of the online model over the stream, against a copy frozen
at some point (and a baseline). The AUC here is exact (ties count one
half), unlike the histogram AUC of the status line, because the curves are
compared to within a few thousandths.
"""
from typing import Dict, List, Sequence, Tuple

import numpy as np

Curve = Tuple[List[int], List[float]]


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


def windowed_auc(labels: np.ndarray, scores: np.ndarray, window: int, step: int, start: int = 0) -> Curve:
    """(end positions, AUC of the ``window`` samples before each), one point every ``step`` samples after
    ``start + window``."""
    ends = list(range(start + window, len(labels) + 1, step))
    return ends, [exact_auc(labels[e - window:e], scores[e - window:e]) for e in ends]


def plot_auc_curves(path: str, curves: Dict[str, Curve], marker_at: int, marker_label: str, title: str) -> None:
    """Writes a PNG of the curves, with a dotted line at ``marker_at``. Needs matplotlib (a dev dependency)."""
    try:
        import matplotlib  # pylint: disable=g-import-not-at-top
    except ImportError as e:
        raise ImportError("plotting AUC curves needs matplotlib (pip install -r requirements-dev.txt)") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
    figure, axes = plt.subplots(figsize=(9, 4.5))
    for label, (x, y) in curves.items():
        axes.plot(x, y, label=label, linewidth=1.5)
    axes.axvline(marker_at, color="grey", linestyle=":", linewidth=1)
    axes.text(marker_at, axes.get_ylim()[0], " " + marker_label, color="grey", va="bottom")
    axes.set_xlabel("samples of the stream")
    axes.set_ylabel("AUC of the last window (prequential)")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
