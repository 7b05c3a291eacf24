"""Sigmoid cross-entropy on logits (``tf.losses.sigmoid_cross_entropy``, which EasyRec's CLASSIFICATION,
F1-reweighted, focal and PAIR_WISE losses reduce with), and the plain CLASSIFICATION loss."""
from typing import Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.tasks.losses.reduction import weighted_mean

tf = ensure_legacy_keras()


def sigmoid_cross_entropies(labels: tf.Tensor, logits: tf.Tensor, label_smoothing: float = 0.0) -> tf.Tensor:
    """Per element -[y log p + (1 - y) log(1 - p)], p = sigmoid(logit); label smoothing makes y
    y (1 - s) + s / 2."""
    if label_smoothing > 0:
        labels = labels * (1.0 - label_smoothing) + 0.5 * label_smoothing
    return tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)


def classification_loss(labels: tf.Tensor, logits: tf.Tensor, weights: Optional[tf.Tensor] = None,
                        sessions: Optional[tf.Tensor] = None) -> tf.Tensor:  # pylint: disable=unused-argument
    """CLASSIFICATION / BINARY_CROSS_ENTROPY_LOSS: the (weighted) mean sigmoid cross-entropy."""
    return weighted_mean(sigmoid_cross_entropies(labels, logits), weights)
