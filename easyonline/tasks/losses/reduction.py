"""How the losses reduce per-sample (or per-pair) values to the batch's loss, as EasyRec's TF1 losses do.

``weighted_mean`` is ``tf.losses``' SUM_BY_NONZERO_WEIGHTS (sum of weight x loss over the number of non-zero
weights; 0 when there is none, e.g. a batch without a pair: the pairwise losses always weigh their pairs);
``hardest_mean`` is EasyRec's OHEM (online hard example mining, ``ohem_ratio``): the mean of the positive ones
among the round(ratio x n) largest.
"""
from typing import Optional

from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()


def weighted_mean(losses: tf.Tensor, weights: Optional[tf.Tensor] = None) -> tf.Tensor:
    """sum(weights * losses) / count(weights != 0), 0 when no weight is (a batch without a pair); without
    weights the plain mean."""
    if weights is None:
        return tf.reduce_mean(losses)
    present = tf.reduce_sum(tf.cast(tf.not_equal(weights, 0.0), losses.dtype))
    return tf.math.divide_no_nan(tf.reduce_sum(losses * weights), present)


def hardest_mean(losses: tf.Tensor, ohem_ratio: float) -> tf.Tensor:
    """The mean of the positive values among the round(ohem_ratio * n) largest of ``losses`` (already
    weighted); 0 when none is positive."""
    k = tf.cast(tf.math.rint(tf.cast(tf.size(losses), tf.float32) * ohem_ratio), tf.int32)
    top = tf.math.top_k(losses, k).values
    kept = tf.boolean_mask(top, top > 0)
    return tf.math.divide_no_nan(tf.reduce_sum(kept), tf.cast(tf.size(kept), losses.dtype))
