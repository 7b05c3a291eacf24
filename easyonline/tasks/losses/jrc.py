"""JRC_LOSS (EasyRec's ``jrc_loss``; Sheng et al. 2022, "Joint Optimization of Ranking and Calibration with
Contextualized Hybrid Model", arXiv:2208.06164): a task of two logits per sample [B, 2] (num_class 2, its
probability softmax(logits)[:, 1]) learns

    alpha * CE + (1 - alpha) * GE

CE: the softmax cross-entropy of the two logits against the 0/1 label (weighted by the sample weights over
the non-zero ones). GE, the generative (list-wise) part: within each sample j's session (the samples of the
batch whose session id equals j's), the log-softmax over the session's samples of the positive logits at the
positives, and of the negative logits at the negatives, summed and divided by the session's size, averaged
over j (a sample j's column weighs w_j). Without ``same_label_loss`` a sample's softmax leaves out the other
samples of its own label. Only EasyRec's "fixed" loss_weight_strategy is supported.
"""
from typing import Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.tasks.losses.reduction import weighted_mean

tf = ensure_legacy_keras()

_MASKED = -1e9


def jrc_loss(labels: tf.Tensor, logits: tf.Tensor, weights: Optional[tf.Tensor] = None,
             sessions: Optional[tf.Tensor] = None, alpha: float = 0.5, same_label_loss: bool = True) -> tf.Tensor:
    if sessions is None:
        raise ValueError("JRC_LOSS needs the samples' session ids (jrc_loss.session_name)")
    ce = weighted_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(labels, tf.int32),
                                                                      logits=logits), weights)
    both = tf.stack([1.0 - labels, labels], axis=1)  # [B, 2]: (negative, positive)
    mask = tf.cast(tf.equal(sessions[:, None], sessions[None, :]), tf.float32)  # [B, B]
    # [i, j]: sample i's values in sample j's session (out of it: no label, a masked logit)
    y = both[:, None, :] * mask[:, :, None]
    masked = logits[:, None, :] + (1.0 - mask[:, :, None]) * _MASKED
    y_neg, y_pos = y[:, :, 0], y[:, :, 1]
    l_neg, l_pos = masked[:, :, 0], masked[:, :, 1]
    if weights is not None:
        y_pos *= weights[None, :]
        y_neg *= weights[None, :]
    if same_label_loss:
        loss_pos = -tf.reduce_sum(y_pos * tf.nn.log_softmax(l_pos, axis=0), axis=0)
        loss_neg = -tf.reduce_sum(y_neg * tf.nn.log_softmax(l_neg, axis=0), axis=0)
        ge = _mean((loss_pos + loss_neg) / tf.reduce_sum(mask, axis=0))
    else:
        off_diagonal = 1.0 - tf.eye(tf.shape(logits)[0])
        l_pos += off_diagonal * y_pos * _MASKED
        l_neg += off_diagonal * y_neg * _MASKED
        loss_pos = -tf.linalg.diag_part(y_pos * tf.nn.log_softmax(l_pos, axis=0))
        loss_neg = -tf.linalg.diag_part(y_neg * tf.nn.log_softmax(l_neg, axis=0))
        ge = _mean(loss_pos + loss_neg)
    return alpha * ce + (1.0 - alpha) * ge


def _mean(values: tf.Tensor) -> tf.Tensor:
    """The mean, 0 over an empty batch (the step that builds the variables)."""
    return tf.math.divide_no_nan(tf.reduce_sum(values), tf.cast(tf.size(values), values.dtype))
