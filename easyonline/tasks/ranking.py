"""Binary ranking (click / no click): the loss of one label and its prequential metrics.

The model asks each of its tasks for the loss of a batch's logits against
its label (``models/ranking_model.py`` ``compute_loss``), and the trainer
hands the primary task the pre-update probabilities of every batch for the
windowed AUC, logloss and CTR. The loss is the mean sigmoid cross-entropy,
as in TFRS's ``tasks.Ranking``; the model adds its regularization losses
once, whatever the number of tasks.
"""
from typing import Dict, Optional, Sequence

import numpy as np

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.metrics import PrequentialMetrics

tf = ensure_legacy_keras()


class RankingTask:
    """Sigmoid cross-entropy on logits of ``label_name``, and score-then-train metrics over ``window_samples``."""

    def __init__(self, window_samples: int = 100000, label_name: str = "label", name: str = "ctr",
                 weight: float = 1.0):
        self.name = name
        self.label_name = label_name
        self.weight = weight
        self.metrics = PrequentialMetrics(window_samples)

    def loss(self, labels: tf.Tensor, logits: tf.Tensor,
             regularization_losses: Sequence[tf.Tensor] = ()) -> tf.Tensor:
        """Mean over the batch of -[y log p + (1-y) log (1-p)], p = sigmoid(logit), plus ``regularization_losses``."""
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
        if regularization_losses:
            loss += tf.add_n(list(regularization_losses))
        return loss

    def outputs(self, logits: tf.Tensor) -> Dict[str, tf.Tensor]:
        return {"logits": logits, "probs": tf.sigmoid(logits)}

    @staticmethod
    def probabilities(logits: tf.Tensor) -> np.ndarray:
        return tf.sigmoid(logits).numpy()

    def update_metrics(self, labels: np.ndarray, probabilities: np.ndarray) -> None:
        """Adds a batch scored before it was trained on (so the figures are out-of-sample)."""
        self.metrics.update(labels, probabilities)

    def auc(self) -> Optional[float]:
        return self.metrics.auc()
