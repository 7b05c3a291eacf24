"""RankingTask (tasks/ranking.py): the loss, the probabilities and the prequential metrics, checked by hand."""
import math

import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()

import numpy as np
import pytest

from easyonline.tasks.ranking import RankingTask

LN2 = math.log(2.0)


def test_loss_is_the_mean_sigmoid_cross_entropy():
    # label 1, logit 0:    -ln sigmoid(0) = -ln(1/2) = ln 2
    # label 0, logit ln 3: -ln(1 - sigmoid(ln 3)) = -ln(1 - 3/4) = ln 4 = 2 ln 2
    # mean: (ln 2 + 2 ln 2) / 2 = 1.5 ln 2 ~= 1.0397
    loss = RankingTask().loss(tf.constant([1.0, 0.0]), tf.constant([0.0, math.log(3.0)]))
    assert loss.shape == () and float(loss) == pytest.approx(1.5 * LN2, rel=1e-6)


def test_sample_weights_weigh_the_loss_over_the_samples_that_count():
    # per sample: label 1, logit 0: ln 2; label 0, logit ln 3: ln(1 + 3) = 2 ln 2
    labels, logits = tf.constant([1.0, 0.0]), tf.constant([0.0, math.log(3.0)])
    # weights 1 and 3: (ln 2 + 3 * 2 ln 2) / 2 samples = 3.5 ln 2
    assert float(RankingTask().loss(labels, logits, tf.constant([1.0, 3.0]))) == pytest.approx(3.5 * LN2, rel=1e-6)
    # weight 0 drops a sample from the mean too (TensorFlow's SUM_BY_NONZERO_WEIGHTS): 2 * ln 2 / 1
    assert float(RankingTask().loss(labels, logits, tf.constant([2.0, 0.0]))) == pytest.approx(2 * LN2, rel=1e-6)
    # a task that does not use sample weights ignores them: (ln 2 + 2 ln 2) / 2
    unweighted = RankingTask(use_sample_weight=False).loss(labels, logits, tf.constant([2.0, 0.0]))
    assert float(unweighted) == pytest.approx(1.5 * LN2, rel=1e-6)


def test_loss_of_confident_right_and_wrong_logits():
    # label 1, logit 20: ln(1 + e^-20) ~= 2.06e-9; label 0, logit 20: ln(1 + e^20) ~= 20 + 2.06e-9.
    # mean ~= 10, computed stably (no log(0) for a saturated sigmoid).
    loss = RankingTask().loss(tf.constant([1.0, 0.0]), tf.constant([20.0, 20.0]))
    assert float(loss) == pytest.approx(10.0, rel=1e-6)


def test_predictions_are_the_sigmoid_of_the_logits():
    # sigmoid(0) = 1/2, sigmoid(ln 3) = 3 / (3 + 1) = 3/4, sigmoid(-ln 3) = 1/4
    probs = RankingTask().predictions(tf.constant([0.0, math.log(3.0), -math.log(3.0)]))
    assert isinstance(probs, np.ndarray)
    np.testing.assert_allclose(probs, [0.5, 0.75, 0.25], rtol=1e-6)


def test_auc_of_four_scored_samples():
    task = RankingTask()
    assert task.auc() is None  # nothing scored yet
    # positives score 0.9 and 0.3, negatives 0.8 and 0.1; of the 2 x 2 pairs the positive ranks higher in
    # (0.9, 0.8), (0.9, 0.1), (0.3, 0.1) but not (0.3, 0.8): AUC = 3/4.
    task.update_metrics(np.array([1, 0, 1, 0]), np.array([0.9, 0.8, 0.3, 0.1]))
    assert task.auc() == pytest.approx(0.75)
    # logloss: -(ln 0.9 + ln 0.2 + ln 0.3 + ln 0.9) / 4 ~= 0.7560
    expected = -(math.log(0.9) + math.log(0.2) + math.log(0.3) + math.log(0.9)) / 4
    assert task.metrics.logloss() == pytest.approx(expected, rel=1e-6)
    assert task.metrics.ctr() == pytest.approx(0.5)


def test_auc_counts_a_tie_as_half():
    task = RankingTask()
    # positives 0.9 and 0.5, negatives 0.8 and 0.5: pairs win 1 + 1 + 0 + 1/2 (the 0.5 tie) = 2.5 of 4.
    task.update_metrics(np.array([1, 0, 1, 0]), np.array([0.9, 0.8, 0.5, 0.5]))
    assert task.auc() == pytest.approx(0.625)


def test_auc_needs_both_labels():
    task = RankingTask()
    task.update_metrics(np.array([1, 1]), np.array([0.2, 0.7]))
    assert task.auc() is None


def test_metrics_slide_over_the_window():
    task = RankingTask(window_samples=4)
    task.update_metrics(np.array([1, 0, 1, 0]), np.array([0.1, 0.9, 0.2, 0.8]))  # every pair wrong: AUC 0
    assert task.auc() == pytest.approx(0.0)
    # A second batch of 4: 8 samples, and dropping the first still leaves 4 >= window, so it is dropped.
    task.update_metrics(np.array([1, 0, 1, 0]), np.array([0.9, 0.8, 0.3, 0.1]))
    assert task.auc() == pytest.approx(0.75) and task.metrics.window_count == 4
    assert task.metrics.total_samples == 8


def test_loss_and_logloss_agree():
    # The logloss of the probabilities is the loss of the logits: both 1.5 ln 2 here.
    task = RankingTask()
    labels, logits = tf.constant([1.0, 0.0]), tf.constant([0.0, math.log(3.0)])
    task.update_metrics(labels.numpy(), task.predictions(logits))
    assert task.metrics.logloss() == pytest.approx(float(task.loss(labels, logits)), rel=1e-5)
