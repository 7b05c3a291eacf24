"""The base of the single-task models: one logit per sample, given to every task of the model.

A subclass implements ``logit(embeddings, first_order, dense, training) -> [B]``; ``logits_from`` adds the
global bias (``global_bias``: one scalar, unless the model's output layer has its own) and gives the logit to
each task (base.py: ``call`` always returns ``{task name: logits}``). The settings' own DNN (``deepfm.dnn``,
``dnn.dnn``, ...; EasyRec's default [256, 128, 64] when it has no hidden units) is built here as ``deep``:
``deep_hidden`` is its last hidden layer over the deep features and every target attention, ``deep_part``
its logit.
"""
from typing import Any, Dict, Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.features.feature_spec import FeatureSpecs
from easyonline.models.base import Embeddings, Model
from easyonline.models.feature_groups import columns_of
from easyonline.models.layers import MLP, normalizes
from easyonline.protos import pipeline_pb2
from easyonline.tasks import Tasks

tf = ensure_legacy_keras()

DEFAULT_HIDDEN_UNITS = (256, 128, 64)


class RankingModel(Model):
    """A model of one logit [B]: ``call(features) -> {task name: logit}`` (the same logit for every task)."""

    global_bias = True  # one scalar bias added to the logit

    def __init__(self, specs: FeatureSpecs, model_config: pipeline_pb2.ModelConfig, dnn: pipeline_pb2.DNN,
                 seed: int = 0, tasks: Optional[Tasks] = None, **kwargs: Any) -> None:
        super().__init__(specs, model_config, dnn, seed=seed, tasks=tasks, **kwargs)
        hidden = list(dnn.hidden_units) or list(DEFAULT_HIDDEN_UNITS)
        self.dropout_ratio = max(self.dropout_ratio, dnn.dropout_ratio)
        self.use_bn = self.use_bn or normalizes(dnn)
        self.deep = MLP(hidden, dnn.activation, dnn.dropout_ratio, dnn.use_bn, model_config.l2_regularization,
                        seed=seed + 100, name="dnn")
        self.deep_logit = tf.keras.layers.Dense(1, name="deep_logit")
        self.bias = self.add_weight(name="bias", shape=(), initializer="zeros") if self.global_bias else None

    def logit(self, embeddings: Embeddings, first_order: Optional[tf.Tensor], dense: Optional[tf.Tensor],
              training: Any) -> tf.Tensor:
        """The model's one logit [B] (before the global bias) from what ``embed`` returned."""
        raise NotImplementedError

    def logits_from(self, embeddings: Embeddings, first_order: Optional[tf.Tensor], dense: Optional[tf.Tensor],
                    training: Any) -> Dict[str, tf.Tensor]:
        logit = self.logit(embeddings, first_order, dense, training)
        if self.bias is not None:
            logit = logit + self.bias
        return {task.name: logit for task in self.tasks}

    def deep_hidden(self, embeddings: Embeddings, dense: Optional[tf.Tensor], training: Any) -> tf.Tensor:
        """The DNN's last hidden layer [B, units] over the deep features and every target attention's output."""
        dense = columns_of(dense, self.deep_dense_columns)
        inputs = ([embeddings.flat()] if embeddings else []) + ([dense] if dense is not None else [])
        inputs += [attention(*self.sequence_input(name, embeddings), training=training)
                   for name, attention in self.attentions.items()]
        return self.deep(tf.concat(inputs, axis=1), training=training)

    def deep_part(self, embeddings: Embeddings, dense: Optional[tf.Tensor], training: Any) -> tf.Tensor:
        """The DNN's logit [B] (``deep_hidden`` through ``deep_logit``)."""
        return tf.squeeze(self.deep_logit(self.deep_hidden(embeddings, dense, training)), axis=1)
