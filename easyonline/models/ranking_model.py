"""The base of every model: embeds features, returns one logit per sample.

A subclass registers its names (``@register("deepfm", "DeepFM")``, see
registry.py), says whether it needs a first-order weight per id
(``uses_first_order``) and whether every id feature must share one
embedding dim (``one_embedding_dim``, checked by the validator), and
implements ``logits_from(embeddings, first_order, dense, training)``.
"""
from typing import Dict, List, Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.embedding.dynamic_tables import DynamicTables
from easyonline.features.feature_spec import FeatureSpecs
from easyonline.models.layers import MLP
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()

DEFAULT_HIDDEN_UNITS = (256, 128, 64)


class RankingModel(tf.keras.Model):
    """Keras model: ``call(features) -> logits [B]``."""

    uses_first_order = False
    one_embedding_dim = False

    def __init__(self, specs: FeatureSpecs, model_config: pipeline_pb2.ModelConfig, dnn: pipeline_pb2.DNN,
                 seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.specs = specs
        self.tables = DynamicTables(specs, extra_dims=1 if self.uses_first_order else 0, seed=seed, name="tables")
        self._embedding_l2 = model_config.embedding_regularization
        hidden = list(dnn.hidden_units) or list(DEFAULT_HIDDEN_UNITS)
        self.dropout_ratio = dnn.dropout_ratio
        self.use_bn = dnn.use_bn
        self.deep = MLP(hidden, dnn.activation, dnn.dropout_ratio, dnn.use_bn, model_config.l2_regularization,
                        seed=seed + 100, name="dnn")
        self.deep_logit = tf.keras.layers.Dense(1, name="deep_logit")
        self.dense_linear = tf.keras.layers.Dense(1, use_bias=False, name="dense_linear") if specs.raw_features else None
        self.bias = self.add_weight(name="bias", shape=(), initializer="zeros")

    @property
    def scores_differ_in_training(self) -> bool:
        """True when training=True changes the forward pass (dropout, batch norm)."""
        return self.dropout_ratio > 0 or self.use_bn

    def embed(self, features: Dict[str, tf.Tensor], training=False, labels=None, now=None):
        """Returns (embeddings [B, dim] per id feature, first-order weights [B, F] or None, dense [B, R] or None).

        ``labels`` and ``now`` (seconds since STATS_EPOCH) feed the per-id statistics in training.
        """
        rows = self.tables(features, training=training, labels=labels, now=now)
        embeddings: List[tf.Tensor] = []
        first_order = []
        for feature in self.specs.id_features:
            row = rows[feature.name]
            dim = self.tables.table_dim(feature.table)
            embeddings.append(row[:, :dim])
            if self.uses_first_order:
                first_order.append(row[:, dim])
        if self._embedding_l2 > 0:
            self.add_loss(self._embedding_l2 * tf.add_n([tf.reduce_mean(tf.reduce_sum(tf.square(e), 1)) for e in embeddings]))
        dense: Optional[tf.Tensor] = None
        if self.specs.raw_features:
            dense = tf.stack([tf.cast(features[f.name], tf.float32) for f in self.specs.raw_features], axis=1)
        return embeddings, (tf.stack(first_order, axis=1) if first_order else None), dense

    def deep_part(self, embeddings, dense, training):
        inputs = embeddings + ([dense] if dense is not None else [])
        return tf.squeeze(self.deep_logit(self.deep(tf.concat(inputs, axis=1), training=training)), axis=1)

    def linear_part(self, first_order, dense):
        linear = tf.reduce_sum(first_order, axis=1)
        if dense is not None:
            linear += tf.squeeze(self.dense_linear(dense), axis=1)
        return linear

    def logits_from(self, embeddings, first_order, dense, training):
        raise NotImplementedError

    def call(self, features, training=False, labels=None, now=None):
        embeddings, first_order, dense = self.embed(features, training, labels, now)
        return self.logits_from(embeddings, first_order, dense, training) + self.bias
