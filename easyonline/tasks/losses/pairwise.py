"""The in-batch pairwise losses (EasyRec's ``loss/pairwise_loss.py``): every pair (i, j) of the batch with
label_i > label_j (and, with a ``session_name``, the same session id) is a pair the model should rank i above
j; the pair's value is of its logit difference s_i - s_j (logits divided by ``temperature`` first).

Sample weights: a pair weighs the sample weight of its higher-labelled sample i (EasyRec tiles the weights
along the rows), and the pairs are reduced over the non-zero weights; a batch without a pair adds 0.
"""
from typing import Optional, Tuple

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.tasks.losses.focal import binary_focal_loss
from easyonline.tasks.losses.reduction import hardest_mean, weighted_mean

tf = ensure_legacy_keras()


def pair_mask(labels: tf.Tensor, sessions: Optional[tf.Tensor] = None) -> tf.Tensor:
    """[B, B]: label_i > label_j (and session_i == session_j when given)."""
    mask = tf.greater(labels[:, None], labels[None, :])
    if sessions is not None:
        mask = tf.logical_and(mask, tf.equal(sessions[:, None], sessions[None, :]))
    return mask


def _pairs(differences: tf.Tensor, mask: tf.Tensor, weights: Optional[tf.Tensor]) -> Tuple[tf.Tensor, tf.Tensor]:
    """(the masked pairs' differences, their weights: the row sample's, or ones, so that no pair reduces
    to 0 rather than NaN)."""
    rows = tf.ones_like(differences) if weights is None else weights[:, None] * tf.ones_like(differences)
    return tf.boolean_mask(differences, mask), tf.boolean_mask(rows, mask)


def pairwise_loss(labels: tf.Tensor, logits: tf.Tensor, weights: Optional[tf.Tensor] = None,
                  sessions: Optional[tf.Tensor] = None, margin: float = 0.0, temperature: float = 1.0) -> tf.Tensor:
    """PAIR_WISE_LOSS (EasyRec's deprecated ``pairwise_loss``): the mean over the pairs of the sigmoid
    cross-entropy of s_i - s_j - margin against 1, i.e. log(1 + exp(-(s_i - s_j - margin)))."""
    logits = logits / temperature if temperature != 1.0 else logits
    differences, pair_weights = _pairs(logits[:, None] - logits[None, :] - margin, pair_mask(labels, sessions),
                                       weights)
    return weighted_mean(tf.nn.softplus(-differences), pair_weights)


def pairwise_logistic_loss(labels: tf.Tensor, logits: tf.Tensor, weights: Optional[tf.Tensor] = None,
                           sessions: Optional[tf.Tensor] = None, temperature: float = 1.0,
                           hinge_margin: Optional[float] = None, ohem_ratio: float = 1.0,
                           use_label_margin: bool = False) -> tf.Tensor:
    """PAIRWISE_LOGISTIC_LOSS (RankNet): sum_ij I[y_i > y_j] log(1 + exp(-(s_i - s_j - m_ij))) over the
    pairs' weights, m_ij = (y_i - y_j) / temperature with ``use_label_margin``, else ``hinge_margin`` (or 0)."""
    if temperature != 1.0:
        logits = logits / temperature
        if use_label_margin:
            labels = labels / temperature
    differences = logits[:, None] - logits[None, :]
    if use_label_margin:
        differences -= labels[:, None] - labels[None, :]
    elif hinge_margin is not None:
        differences -= hinge_margin
    differences, pair_weights = _pairs(differences, pair_mask(labels, sessions), weights)
    losses = tf.nn.softplus(-differences)
    if ohem_ratio == 1.0:
        return weighted_mean(losses, pair_weights)
    return hardest_mean(losses * pair_weights, ohem_ratio)


def pairwise_focal_loss(labels: tf.Tensor, logits: tf.Tensor, weights: Optional[tf.Tensor] = None,
                        sessions: Optional[tf.Tensor] = None, gamma: float = 2.0, alpha: Optional[float] = None,
                        hinge_margin: Optional[float] = None, ohem_ratio: float = 1.0,
                        temperature: float = 1.0) -> tf.Tensor:
    """PAIRWISE_FOCAL_LOSS: the binary focal loss of each pair's s_i - s_j against 1; with ``hinge_margin``,
    pairs already apart by it (s_i - s_j >= margin) are left out."""
    logits = logits / temperature if temperature != 1.0 else logits
    differences = logits[:, None] - logits[None, :]
    mask = pair_mask(labels, sessions)
    if hinge_margin is not None:
        mask = tf.logical_and(mask, tf.less(differences, hinge_margin))
    differences, pair_weights = _pairs(differences, mask, weights)
    return binary_focal_loss(tf.ones_like(differences), differences, pair_weights if weights is not None else None,
                             gamma=gamma, alpha=alpha, ohem_ratio=ohem_ratio)
