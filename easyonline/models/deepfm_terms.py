"""DeepFM's terms beside its DNN: the first-order (linear) term and the FM second-order term.

Mixed into a model (``class DeepFM(DeepFMTerms, FinalDNN, RankingModel)``), so that the layers stay the
model's own attributes (``dense_linear``, ``fm``: their checkpoint paths and update ids are those of
every model trained before):

- ``linear_part``: the wide ids' first-order weights summed, plus a linear layer over the wide raw
  features; ``wide_vector`` the same as a vector (``wide_output_dim`` wide), for EasyRec's final_dnn;
- the FM term (``fm``, layers.py's FMInteraction) over the deep ids' embeddings;
- ``deepfm_terms`` of a multi-task model (not EasyRec's): both terms shared by the tasks, each task with its
  own scale of each, added to its logit. DNN experts learn an id's bias and the dot products of two ids'
  embeddings only slowly, from few samples.

A model using them asks for first-order weights (``uses_first_order``, or ``first_order_dim``) and builds
them with ``build_deepfm_terms``.
"""
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.features.feature_spec import FeatureSpecs
from easyonline.models.feature_groups import columns_of
from easyonline.models.layers import FMInteraction

tf = ensure_legacy_keras()


class DeepFMTerms:
    """Mixin of a model (base.py ``Model``): DeepFM's first-order and FM terms, and their per-task scales."""

    # (instance attributes only: Keras does not track a layer assigned to a name the class defines)
    dense_linear: Any  # the wide raw features' linear layer (None: no raw features)
    fm: Any  # the FM layer (None until built)
    deepfm_scales: Optional[Any]  # [2, tasks] of a multi-task model: each task's scale of both terms

    if TYPE_CHECKING:  # what the mixin reads of base.py's Model (declared for the type checker only)
        specs: FeatureSpecs
        wide_dim: int
        wide_dense_columns: Optional[List[int]]

        def add_weight(self, **kwargs: Any) -> Any: ...

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dense_linear = self.fm = self.deepfm_scales = None

    def build_linear_term(self) -> None:
        """The wide raw features' linear layer (``linear_part``, ``wide_vector``), when there are raw features."""
        self.dense_linear = tf.keras.layers.Dense(1, use_bias=False, name="dense_linear") \
            if self.specs.raw_features else None

    def build_deepfm_terms(self, tasks: int = 0) -> None:
        """The linear term's layer and the FM layer; with ``tasks`` (a multi-task model's ``deepfm_terms``)
        each task's scale of the first-order and of the FM term, both 1 at the start."""
        self.build_linear_term()
        self.fm = FMInteraction(name="fm")
        if tasks:
            self.deepfm_scales = self.add_weight(name="deepfm_term_scales", shape=(2, tasks), initializer="ones")

    def linear_part(self, first_order: Optional[tf.Tensor], dense: Optional[tf.Tensor]) -> Any:
        """The first-order term [B] (0.0 when the model has neither wide ids nor wide raw features)."""
        linear: Any = 0.0
        if first_order is not None:
            linear = tf.reduce_sum(tf.reshape(first_order, [tf.shape(first_order)[0], -1]), axis=1)
        dense = columns_of(dense, self.wide_dense_columns)
        if dense is not None:
            linear += tf.squeeze(self.dense_linear(dense), axis=1)
        return linear

    def wide_vector(self, first_order: Optional[tf.Tensor], dense: Optional[tf.Tensor]) -> tf.Tensor:
        """The wide part [B, wide_dim (+1 with dense features)]: first-order weights summed over features."""
        batch = tf.shape(dense if first_order is None else first_order)[0]
        parts = [tf.zeros([batch, self.wide_dim]) if first_order is None
                 else tf.reshape(tf.reduce_sum(first_order, axis=1), [-1, self.wide_dim])]
        dense = columns_of(dense, self.wide_dense_columns)
        if dense is not None:
            parts.append(self.dense_linear(dense))
        return tf.concat(parts, axis=1)

    def with_deepfm_terms(self, logits: Dict[str, tf.Tensor], embeddings: Any, first_order: Any,
                          dense: Any) -> Dict[str, tf.Tensor]:
        """A multi-task model's logits by task name plus each task's DeepFM terms (in ``logits``' order),
        when it has them; else ``logits`` as they are."""
        if self.deepfm_scales is None:
            return logits
        fm = self.fm(embeddings.stacked())
        terms = tf.stack([self.linear_part(first_order, dense) + tf.zeros_like(fm), fm], axis=1)  # [B, 2]
        scaled = tf.matmul(terms, self.deepfm_scales)  # [B, tasks]: column t is task t's share
        return {name: logit + scaled[:, t] for t, (name, logit) in enumerate(logits.items())}
