"""Binary ranking (click / no click): the loss the trainer minimises and its prequential metrics.

The trainer asks the task for the loss of a batch's logits and hands it the
pre-update probabilities of every batch for the windowed AUC, logloss and
CTR; multi-task models and learning-quality work plug in here, not into the
training step. The loss is the mean sigmoid cross-entropy plus the model's
regularization losses, as in TFRS's ``tasks.Ranking``.
"""
from typing import Optional, Sequence

import numpy as np

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.metrics import PrequentialMetrics

tf = ensure_legacy_keras()


class RankingTask:
    """Sigmoid cross-entropy on logits, and score-then-train metrics over ``window_samples``."""

    def __init__(self, window_samples: int = 100000):
        self.metrics = PrequentialMetrics(window_samples)

    def loss(self, labels: tf.Tensor, logits: tf.Tensor,
             regularization_losses: Sequence[tf.Tensor] = ()) -> tf.Tensor:
        """Mean over the batch of -[y log p + (1-y) log (1-p)], p = sigmoid(logit), plus the regularization."""
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
        if regularization_losses:
            loss += tf.add_n(list(regularization_losses))
        return loss

    @staticmethod
    def probabilities(logits: tf.Tensor) -> np.ndarray:
        return tf.sigmoid(logits).numpy()

    def update_metrics(self, labels: np.ndarray, probabilities: np.ndarray) -> None:
        """Adds a batch scored before it was trained on (so the figures are out-of-sample)."""
        self.metrics.update(labels, probabilities)

    def auc(self) -> Optional[float]:
        return self.metrics.auc()
