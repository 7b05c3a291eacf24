"""F1_REWEIGHTED_LOSS (EasyRec's ``f1_reweight_sigmoid_cross_entropy``; Adaptive Scaling for Sparse Detection in
Information Extraction, Lu et al. 2018): cross-entropy whose negatives weigh

    w_neg = TP / (beta^2 * num_pos + num_neg - TN + 1e-8),  TP = sum(p), TN = B - TP, p = sigmoid(logit)

(positives weigh 1), each times its sample weight, reduced as ``tf.losses`` does (over the non-zero weights).
As in EasyRec the weights are not held constant: the gradient flows through w_neg too.
"""
from typing import Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.tasks.losses.cross_entropy import sigmoid_cross_entropies
from easyonline.tasks.losses.reduction import weighted_mean

tf = ensure_legacy_keras()


def f1_reweighted_loss(labels: tf.Tensor, logits: tf.Tensor, weights: Optional[tf.Tensor] = None,
                       sessions: Optional[tf.Tensor] = None,  # pylint: disable=unused-argument
                       f1_beta_square: float = 1.0, label_smoothing: float = 0.0) -> tf.Tensor:
    probs = tf.sigmoid(logits)
    batch = tf.cast(tf.size(labels), tf.float32)
    num_pos = tf.reduce_sum(labels)
    num_neg = batch - num_pos
    tp = tf.reduce_sum(probs)
    tn = batch - tp
    neg_weight = tp / (f1_beta_square * num_pos + num_neg - tn + 1e-8)
    final = tf.where(tf.equal(labels, 1.0), tf.ones_like(labels), neg_weight * tf.ones_like(labels))
    if weights is not None:
        final *= weights
    return weighted_mean(sigmoid_cross_entropies(labels, logits, label_smoothing), final)
