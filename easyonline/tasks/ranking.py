"""Binary ranking (click / no click): the loss of one label and its prequential metrics.

The model asks each of its tasks for the loss of a batch's logits against
its label (``models/ranking_model.py`` ``compute_loss``), and the trainer
hands the primary task the pre-update probabilities of every batch for the
windowed AUC, logloss and CTR. The loss is the mean sigmoid cross-entropy
(weighted by the samples' weights, when given), as in TFRS's
``tasks.Ranking``; the model adds its regularization losses once, whatever
the number of tasks. EasyRec's ``loss_type: CLASSIFICATION``.
"""
from typing import Dict, Optional

import numpy as np

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.metrics import PrequentialMetrics
from easyonline.tasks.task import weighted_mean

tf = ensure_legacy_keras()


class RankingTask:
    """Sigmoid cross-entropy on logits of ``label_name``, and score-then-train metrics over ``window_samples``."""

    kind = "binary"

    def __init__(self, window_samples: int = 100000, label_name: str = "label", name: str = "ctr",
                 weight: float = 1.0, use_sample_weight: bool = True, times_label: str = ""):
        self.name = name
        self.label_name = label_name
        self.times_label = times_label
        self.weight = weight
        self.use_sample_weight = use_sample_weight
        self.metrics = PrequentialMetrics(window_samples)

    def loss(self, labels: tf.Tensor, logits: tf.Tensor, sample_weight: Optional[tf.Tensor] = None) -> tf.Tensor:
        """(Weighted) mean over the batch of -[y log p + (1-y) log (1-p)], p = sigmoid(logit)."""
        losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
        return weighted_mean(losses, sample_weight if self.use_sample_weight else None)

    def outputs(self, logits: tf.Tensor, suffix: str = "") -> Dict[str, tf.Tensor]:
        return {f"logits{suffix}": logits, f"probs{suffix}": tf.sigmoid(logits)}

    @staticmethod
    def predictions(logits) -> np.ndarray:
        return tf.sigmoid(logits).numpy()

    def update_metrics(self, labels: np.ndarray, predictions: np.ndarray) -> None:
        """Adds a batch scored before it was trained on (so the figures are out-of-sample)."""
        self.metrics.update(labels, predictions)

    def auc(self) -> Optional[float]:
        return self.metrics.auc()
