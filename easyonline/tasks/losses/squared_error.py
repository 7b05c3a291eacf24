"""L2_LOSS: the (weighted) mean of (prediction - label)^2, EasyRec's ``tf.losses.mean_squared_error``."""
from typing import Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.tasks.losses.reduction import weighted_mean

tf = ensure_legacy_keras()


def l2_loss(labels: tf.Tensor, logits: tf.Tensor, weights: Optional[tf.Tensor] = None,
            sessions: Optional[tf.Tensor] = None) -> tf.Tensor:  # pylint: disable=unused-argument
    """The logit is the prediction (no sigmoid)."""
    return weighted_mean(tf.square(logits - labels), weights)
