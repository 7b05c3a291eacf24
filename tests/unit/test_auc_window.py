"""Windowed prequential AUC against an exact rank-based AUC."""
import numpy as np

from easyonline.core.metrics import PrequentialMetrics


def exact_auc(labels, scores):
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels > 0.5
    return (ranks[pos].sum() - pos.sum() * (pos.sum() + 1) / 2) / (pos.sum() * (~pos).sum())


def test_auc_and_logloss_match_exact_values():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 5000).astype(float)
    scores = np.clip(0.3 * labels + rng.random(5000) * 0.7, 0, 1)
    metrics = PrequentialMetrics(window_samples=10**6)
    for i in range(0, 5000, 1000):
        metrics.update(labels[i:i + 1000], scores[i:i + 1000])
    assert abs(metrics.auc() - exact_auc(labels, scores)) < 1e-3
    p = np.clip(scores, 1e-7, 1 - 1e-7)
    assert abs(metrics.logloss() - np.mean(-(labels * np.log(p) + (1 - labels) * np.log(1 - p)))) < 1e-9


def test_window_forgets_old_batches():
    metrics = PrequentialMetrics(window_samples=2000)
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 1000).astype(float)
    for _ in range(3):  # perfectly wrong scores
        metrics.update(labels, 1 - labels)
    assert metrics.auc() < 0.01
    for _ in range(2):  # perfectly right scores fill the window
        metrics.update(labels, labels)
    assert metrics.window_count == 2000
    assert metrics.auc() > 0.99
    assert metrics.total_samples == 5000
