"""PrequentialMetrics: windowed AUC (from score histograms), logloss and CTR, checked on hand-scored examples."""
import math

import numpy as np
import pytest

import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core.metrics import PrequentialMetrics, auc_from_histograms


def test_auc_with_one_mis_ordered_pair():
    metrics = PrequentialMetrics()
    # positives 0.9, 0.4; negatives 0.6, 0.1. Pairs (pos > neg): 0.9>0.6 yes, 0.9>0.1 yes, 0.4>0.6 no,
    # 0.4>0.1 yes: 3 of 4 = 0.75
    metrics.update(np.array([1, 1, 0, 0]), np.array([0.9, 0.4, 0.6, 0.1]))
    assert metrics.auc() == pytest.approx(0.75)


def test_auc_is_order_free_and_perfect_or_inverted():
    right = PrequentialMetrics()
    right.update(np.array([0, 1, 0, 1]), np.array([0.2, 0.8, 0.3, 0.7]))
    assert right.auc() == pytest.approx(1.0)  # every positive above every negative
    wrong = PrequentialMetrics()
    wrong.update(np.array([0, 1, 0, 1]), np.array([0.8, 0.2, 0.7, 0.3]))
    assert wrong.auc() == pytest.approx(0.0)


def test_ties_count_half():
    metrics = PrequentialMetrics()
    # positives 0.7, 0.5; negative 0.5: 0.7>0.5 counts 1, 0.5=0.5 counts 1/2: 1.5 / 2 = 0.75
    metrics.update(np.array([1, 1, 0]), np.array([0.7, 0.5, 0.5]))
    assert metrics.auc() == pytest.approx(0.75)
    all_tied = PrequentialMetrics()
    all_tied.update(np.array([1, 0, 1, 0]), np.full(4, 0.3))
    assert all_tied.auc() == pytest.approx(0.5)


def test_scores_in_one_bucket_tie():
    # with 10 buckets, 0.51 and 0.59 both fall in bucket 5 (int(5.1) = int(5.9) = 5): a tie, AUC 0.5,
    # though the exact AUC is 1; 0.49 (bucket 4) vs 0.51 (bucket 5) is told apart
    coarse = PrequentialMetrics(buckets=10)
    coarse.update(np.array([1, 0]), np.array([0.59, 0.51]))
    assert coarse.auc() == pytest.approx(0.5)
    apart = PrequentialMetrics(buckets=10)
    apart.update(np.array([1, 0]), np.array([0.51, 0.49]))
    assert apart.auc() == pytest.approx(1.0)


def test_extreme_scores_are_clipped_into_the_histogram():
    metrics = PrequentialMetrics(buckets=100)
    # 1.0 * 100 = 100 would be one past the last bucket; it is clipped to 1 - 1e-7 (bucket 99)
    metrics.update(np.array([1, 0]), np.array([1.0, 0.0]))
    assert metrics.auc() == pytest.approx(1.0)
    # both logs are of 1 - 1e-7: logloss = -ln(1 - 1e-7) ~= 1e-7, not 0 and not inf
    assert metrics.logloss() == pytest.approx(1e-7, rel=1e-3)
    wrong = PrequentialMetrics()
    wrong.update(np.array([1]), np.array([0.0]))
    assert wrong.logloss() == pytest.approx(-math.log(1e-7))  # ~16.12, finite


def test_logloss_and_ctr_by_hand():
    metrics = PrequentialMetrics()
    metrics.update(np.array([1.0, 0.0]), np.array([0.8, 0.4]))
    # -(ln 0.8 + ln(1 - 0.4)) / 2 = (0.2231436 + 0.5108256) / 2 = 0.3669846
    assert metrics.logloss() == pytest.approx(0.3669846, abs=1e-7)
    assert metrics.ctr() == pytest.approx(0.5)
    metrics.update(np.array([[1.0], [1.0]]), np.array([[0.5], [0.5]]))  # any shape is flattened
    # window: labels 1, 0, 1, 1: ctr 3/4; logloss (0.7339692 + 2 ln 2) / 4 = (0.7339692 + 1.3862944) / 4
    assert metrics.ctr() == pytest.approx(0.75)
    assert metrics.logloss() == pytest.approx(0.5300659, abs=1e-7)
    assert metrics.window_count == 4 and metrics.total_samples == 4


def test_nothing_to_report_yet():
    metrics = PrequentialMetrics()
    assert (metrics.auc(), metrics.logloss(), metrics.ctr()) == (None, None, None)
    metrics.update(np.array([1, 1]), np.array([0.2, 0.9]))
    assert metrics.auc() is None  # one class only: AUC undefined
    assert metrics.ctr() == 1.0 and metrics.logloss() is not None


def test_window_evicts_whole_old_batches():
    metrics = PrequentialMetrics(window_samples=4)
    metrics.update(np.array([1, 0]), np.array([0.2, 0.8]))  # A: inverted
    metrics.update(np.array([1, 0]), np.array([0.9, 0.1]))  # B: right
    # window A + B: positives 0.2, 0.9; negatives 0.8, 0.1: 0.2>0.8 no, 0.2>0.1, 0.9>0.8, 0.9>0.1: 3/4
    assert metrics.window_count == 4 and metrics.auc() == pytest.approx(0.75)
    metrics.update(np.array([1, 0]), np.array([0.7, 0.3]))  # C: right
    # 6 samples; without A still 4 >= window: A leaves. B + C: all 4 pairs right
    assert metrics.window_count == 4 and metrics.auc() == pytest.approx(1.0)
    # B + C logloss: -(ln .9 + ln .9 + ln .7 + ln .7) / 4 = (0.1053605 + 0.3566749) / 2 = 0.2310177
    assert metrics.logloss() == pytest.approx(0.2310177, abs=1e-7)
    assert metrics.ctr() == pytest.approx(0.5)
    # totals keep A: -(2 ln .2) + 2 x 0.1053605 + 2 x 0.3566749 = 3.2188758 + 0.9240708 = 4.1429466
    assert metrics.total_samples == 6
    assert metrics.total_logloss == pytest.approx(4.1429466, abs=1e-6)


def test_window_keeps_at_least_window_samples():
    metrics = PrequentialMetrics(window_samples=4)
    for _ in range(3):  # batches of 3: dropping the oldest would leave 3 < 4, so two batches stay
        metrics.update(np.array([1, 0, 0]), np.array([0.6, 0.5, 0.4]))
    assert metrics.window_count == 6
    big = PrequentialMetrics(window_samples=4)
    big.update(np.array([1, 0]), np.array([0.9, 0.1]))
    big.update(np.array([0] * 5 + [1]), np.array([0.9] * 5 + [0.1]))  # one batch larger than the window
    # 7 - 2 = 5 >= 4: the first batch leaves; the 6-sample batch stays whole (all pairs wrong)
    assert big.window_count == 6 and big.auc() == pytest.approx(0.0)


def test_auc_from_histograms_directly():
    # bucket:        0  1  2
    pos = np.array([0, 1, 2])
    neg = np.array([2, 1, 0])
    # positive in bucket 1: 2 negatives below + half of 1 tie = 2.5; each positive in bucket 2: 3 below
    # (2.5 + 2 x 3) / (3 x 3) = 8.5 / 9
    assert auc_from_histograms(pos, neg) == pytest.approx(8.5 / 9)
    assert auc_from_histograms(np.zeros(3), neg) is None
    assert auc_from_histograms(pos, np.zeros(3)) is None
