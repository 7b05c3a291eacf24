"""Regression (a watch time, a rating): mean squared error on one numeric label, and its prequential MSE.

EasyRec's ``loss_type: L2_LOSS`` (or ``losses`` of L2_LOSS only). The
tower's output is the prediction itself (``y`` / ``y_<tower>``, no
sigmoid); the windowed MSE is scored before each update, like the binary
tasks' AUC.
"""
from typing import Any, Dict, Mapping, Optional, Sequence

import numpy as np

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.metrics import RegressionMetrics
from easyonline.features.label_kinds import REGRESSION
from easyonline.tasks.losses.squared_error import l2_loss
from easyonline.tasks.losses.terms import LossTerm, terms_loss

tf = ensure_legacy_keras()


class RegressionTask:
    """Squared error of the logit (the prediction) against ``label_name`` (or the sum of its terms)."""

    kind = REGRESSION
    num_class = 1

    def __init__(self, window_samples: int = 100000, label_name: str = "label", name: str = "regression",
                 weight: float = 1.0, use_sample_weight: bool = True, times_label: str = "",
                 terms: Sequence[LossTerm] = ()) -> None:
        self.name = name
        self.label_name = label_name
        self.times_label = times_label
        self.weight = weight
        self.use_sample_weight = use_sample_weight
        self.terms = tuple(terms) or (LossTerm("l2_loss", 1.0, l2_loss, REGRESSION),)
        self.metrics = RegressionMetrics(window_samples)

    def loss(self, labels: tf.Tensor, logits: tf.Tensor, sample_weight: Optional[tf.Tensor] = None,
             features: Optional[Mapping[str, tf.Tensor]] = None) -> tf.Tensor:
        """Alone, the (weighted) mean over the batch of (logit - label)^2."""
        return terms_loss(self.terms, labels, logits, sample_weight if self.use_sample_weight else None, features)

    @staticmethod
    def scores(logits: tf.Tensor) -> tf.Tensor:
        return logits

    def outputs(self, logits: tf.Tensor, suffix: str = "") -> Dict[str, tf.Tensor]:
        return {f"y{suffix}": logits}

    @staticmethod
    def predictions(logits: Any) -> np.ndarray:
        return np.asarray(logits, np.float32)

    def update_metrics(self, labels: np.ndarray, predictions: np.ndarray) -> None:
        self.metrics.update(labels, predictions)
