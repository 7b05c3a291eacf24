"""Binary ranking (click / no click): the loss of one label and its prequential metrics.

The model asks each of its tasks for the loss of a batch's logits against
its label (``models/base.py`` ``compute_loss``), and the trainer
hands the primary task the pre-update probabilities of every batch for the
windowed AUC, logloss and CTR. The loss is the mean sigmoid cross-entropy
(weighted by the samples' weights, when given), as in TFRS's
``tasks.Ranking`` (EasyRec's ``loss_type: CLASSIFICATION``), or the weighted
sum of the task's ``losses`` (tasks/losses/: F1-reweighted, focal, pairwise,
JRC...); the model adds its regularization losses once, whatever the number
of tasks. A task with JRC_LOSS has two logits per sample (``num_class`` 2):
its probability is softmax(logits)[:, 1].
"""
from typing import Any, Dict, Mapping, Optional, Sequence

import numpy as np

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.metrics import PrequentialMetrics
from easyonline.features.label_kinds import BINARY
from easyonline.tasks.losses.cross_entropy import classification_loss
from easyonline.tasks.losses.terms import LossTerm, terms_loss

tf = ensure_legacy_keras()


class RankingTask:
    """A 0/1 label's task: its loss terms (default: sigmoid cross-entropy on logits of ``label_name``), and
    score-then-train metrics over ``window_samples``."""

    kind = BINARY

    def __init__(self, window_samples: int = 100000, label_name: str = "label", name: str = "ctr",
                 weight: float = 1.0, use_sample_weight: bool = True, times_label: str = "",
                 terms: Sequence[LossTerm] = ()) -> None:
        self.name = name
        self.label_name = label_name
        self.times_label = times_label
        self.weight = weight
        self.use_sample_weight = use_sample_weight
        self.terms = tuple(terms) or (LossTerm("cross_entropy_loss", 1.0, classification_loss, BINARY),)
        self.num_class = max(term.num_class for term in self.terms)
        self.metrics = PrequentialMetrics(window_samples)

    def loss(self, labels: tf.Tensor, logits: tf.Tensor, sample_weight: Optional[tf.Tensor] = None,
             features: Optional[Mapping[str, tf.Tensor]] = None) -> tf.Tensor:
        """sum(weight_i * loss_i) of its terms; alone, the (weighted) mean over the batch of
        -[y log p + (1-y) log (1-p)], p = sigmoid(logit)."""
        return terms_loss(self.terms, labels, logits, sample_weight if self.use_sample_weight else None, features)

    def scores(self, logits: tf.Tensor) -> tf.Tensor:
        """The probability: sigmoid(logit), or softmax(logits)[:, 1] of two."""
        return tf.sigmoid(logits) if self.num_class == 1 else tf.nn.softmax(logits, axis=-1)[:, 1]

    def outputs(self, logits: tf.Tensor, suffix: str = "") -> Dict[str, tf.Tensor]:
        """EasyRec's: ``logits``, ``probs``; of two logits also ``pos_logits`` (the positive class's)."""
        named = {f"logits{suffix}": logits, f"probs{suffix}": self.scores(logits)}
        if self.num_class == 2:
            named[f"pos_logits{suffix}"] = logits[:, 1]
        return named

    def predictions(self, logits: Any) -> np.ndarray:
        return self.scores(logits).numpy()

    def update_metrics(self, labels: np.ndarray, predictions: np.ndarray) -> None:
        """Adds a batch scored before it was trained on (so the figures are out-of-sample)."""
        self.metrics.update(labels, predictions)

    def auc(self) -> Optional[float]:
        return self.metrics.auc()
