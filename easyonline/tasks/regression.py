"""Regression (a watch time, a rating): mean squared error on one numeric label, and its prequential MSE.

EasyRec's ``loss_type: L2_LOSS``. The tower's output is the prediction itself
(``y`` / ``y_<tower>``, no sigmoid); the windowed MSE is scored before each
update, like the binary tasks' AUC.
"""
from typing import Dict, Optional

import numpy as np

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.metrics import RegressionMetrics
from easyonline.tasks.task import weighted_mean

tf = ensure_legacy_keras()


class RegressionTask:
    """Squared error of the logit (the prediction) against ``label_name``."""

    kind = "regression"

    def __init__(self, window_samples: int = 100000, label_name: str = "label", name: str = "regression",
                 weight: float = 1.0, use_sample_weight: bool = True, times_label: str = ""):
        self.name = name
        self.label_name = label_name
        self.times_label = times_label
        self.weight = weight
        self.use_sample_weight = use_sample_weight
        self.metrics = RegressionMetrics(window_samples)

    def loss(self, labels: tf.Tensor, logits: tf.Tensor, sample_weight: Optional[tf.Tensor] = None) -> tf.Tensor:
        """(Weighted) mean over the batch of (logit - label)^2."""
        return weighted_mean(tf.square(logits - labels), sample_weight if self.use_sample_weight else None)

    def outputs(self, logits: tf.Tensor, suffix: str = "") -> Dict[str, tf.Tensor]:
        return {f"y{suffix}": logits}

    @staticmethod
    def predictions(logits) -> np.ndarray:
        return np.asarray(logits, np.float32)

    def update_metrics(self, labels: np.ndarray, predictions: np.ndarray) -> None:
        self.metrics.update(labels, predictions)
