"""EasyRec's ``final_dnn`` of DeepFM and WideAndDeep: the parts' vectors concatenated, a DNN, then the logit.

Mixed into a model (``class WideAndDeep(DeepFMTerms, FinalDNN, RankingModel)``) so that its layers stay the
model's own attributes (``final_dnn``, ``final_logit``: checkpoint paths and update ids unchanged). Without
``build_final_dnn`` the model sums its parts' logits instead (``final_dnn`` is None).
"""
from typing import TYPE_CHECKING, Any, List, Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.models.layers import MLP, normalizes
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()


class FinalDNN:
    """Mixin of a model (base.py ``Model``): EasyRec's final_dnn and its logit."""

    # (instance attributes only: Keras does not track a layer assigned to a name the class defines)
    final_dnn: Optional[MLP]
    final_logit: Any

    if TYPE_CHECKING:  # what the mixin reads and raises of base.py's Model (for the type checker only)
        dropout_ratio: float
        use_bn: bool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.final_dnn = self.final_logit = None

    def build_final_dnn(self, final: pipeline_pb2.DNN, model_config: pipeline_pb2.ModelConfig, seed: int) -> None:
        """The final DNN (its own seed) and its one-unit logit; its dropout and batch norm count in the model's
        ``scores_differ_in_training``."""
        self.final_dnn = MLP(list(final.hidden_units), final.activation, final.dropout_ratio, final.use_bn,
                             model_config.l2_regularization, seed=seed + 200, name="final_dnn")
        self.final_logit = tf.keras.layers.Dense(1, name="final_logit")
        self.dropout_ratio = max(self.dropout_ratio, final.dropout_ratio)
        self.use_bn = self.use_bn or normalizes(final)

    def final_logits(self, parts: List[tf.Tensor], training: Any) -> tf.Tensor:
        """The logit [B] of the final DNN over ``parts`` concatenated."""
        if self.final_dnn is None:
            raise ValueError(f"{type(self).__name__} has no final_dnn (build_final_dnn makes it)")
        hidden = self.final_dnn(tf.concat(parts, axis=1), training=training)
        return tf.squeeze(self.final_logit(hidden), axis=1)
