"""BINARY_FOCAL_LOSS (EasyRec's ``sigmoid_focal_loss_with_logits``; Lin et al. 2017, arXiv:1708.02002):
cross-entropy weighted by (1 - p_t)^gamma, p_t = p for a positive and 1 - p for a negative (p clipped to
[1e-7, 1 - 1e-7]), times alpha for positives and 1 - alpha for negatives when alpha is given, times the sample
weight; reduced over the non-zero weights, or with ``ohem_ratio`` < 1 as the mean of the hardest examples.
As in EasyRec the gradient flows through the focal weights too.
"""
from typing import Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.tasks.losses.cross_entropy import sigmoid_cross_entropies
from easyonline.tasks.losses.reduction import hardest_mean, weighted_mean

tf = ensure_legacy_keras()


def binary_focal_loss(labels: tf.Tensor, logits: tf.Tensor, weights: Optional[tf.Tensor] = None,
                      sessions: Optional[tf.Tensor] = None,  # pylint: disable=unused-argument
                      gamma: float = 2.0, alpha: Optional[float] = None, ohem_ratio: float = 1.0,
                      label_smoothing: float = 0.0) -> tf.Tensor:
    probs = tf.clip_by_value(tf.sigmoid(logits), 1e-7, 1 - 1e-7)
    p_t = labels * probs + (1 - labels) * (1 - probs)
    focal = tf.pow(1 - p_t, gamma)
    if alpha is not None:
        focal *= labels * alpha + (1 - alpha) * (1 - labels)
    if weights is not None:
        focal *= weights
    losses = sigmoid_cross_entropies(labels, logits, label_smoothing)
    if ohem_ratio == 1.0:
        return weighted_mean(losses, focal)
    return hardest_mean(losses * focal, ohem_ratio)
