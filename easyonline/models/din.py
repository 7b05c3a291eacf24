"""DIN (Zhou et al. 2018; EasyRec's ``DIN``): target attention over behaviour sequences, then a DNN and a logit.

Every deep feature group's input is read with ``group_input``, which holds
its plain features and the output of each of its ``sequence_features``
(a ``TargetAttention``: the sequence summed by the attention DNN's weights,
then the target's keys); they are concatenated, ``din.dnn`` (default
256-128-64) and a 1-unit layer give the logit of the model's one task.
``din.attention_dnn`` and ``din.attention_normalizer`` are the attention of
sequence groups without their own ``seq_dnn``.
"""
from typing import Any, Optional, Tuple

from easyonline.features.feature_spec import FeatureSpecs
from easyonline.features.sequence_settings import NORMALIZERS, validate_attention_dnn
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.errors import ConfigError
from easyonline.models.base import Embeddings
from easyonline.models.ranking_model import DEFAULT_HIDDEN_UNITS, RankingModel
from easyonline.models.registry import register
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()


def deep_groups(model_config: pipeline_pb2.ModelConfig) -> list:
    """The names of the feature groups that feed the deep part (DEEP or WIDE_AND_DEEP), in config order."""
    return [g.group_name for g in model_config.feature_groups if g.wide_deep != pipeline_pb2.FeatureGroup.WIDE]


@register("din", "DIN")
class DIN(RankingModel):
    global_bias = False  # the output layer has its bias

    @classmethod
    def validate_settings(cls, config: pipeline_pb2.PipelineConfig, path: str) -> None:
        settings = config.model_config.din
        if settings.attention_normalizer not in NORMALIZERS:
            raise ConfigError(f"{path}.attention_normalizer",
                              f"{settings.attention_normalizer!r} is not one of {', '.join(NORMALIZERS)}")
        if settings.HasField("attention_dnn"):
            validate_attention_dnn(settings.attention_dnn, f"{path}.attention_dnn")
        groups = config.model_config.feature_groups
        if not any(s for g in groups if g.wide_deep != pipeline_pb2.FeatureGroup.WIDE for s in g.sequence_features):
            raise ConfigError("model_config.feature_groups", "DIN attends over behaviour sequences: give a DEEP group "
                              "sequence_features { seq_att_map { key: <target item feature> hist_seq: <SequenceFeature> } }")
        names = [g.group_name for g in groups if g.wide_deep != pipeline_pb2.FeatureGroup.WIDE]
        if len(set(names)) != len(names) or not all(names):
            raise ConfigError("model_config.feature_groups.group_name", f"DIN reads every deep group by name: they "
                              f"need distinct names, got {names}")

    def __init__(self, specs: FeatureSpecs, model_config: pipeline_pb2.ModelConfig, dnn: pipeline_pb2.DNN,
                 seed: int = 0, **kwargs: Any) -> None:
        super().__init__(specs, model_config, dnn, seed=seed, **kwargs)
        settings = model_config.din
        l2 = model_config.l2_regularization or settings.l2_regularization
        self.group_names = deep_groups(model_config)
        hidden = pipeline_pb2.DNN()
        hidden.CopyFrom(settings.dnn)
        if not hidden.hidden_units:
            hidden.hidden_units.extend(DEFAULT_HIDDEN_UNITS)
        self.din_dnn = self.mlp(hidden, l2, "din_dnn")
        self.output_logit = self.logit_layer(0.0, "output")

    def attention_defaults(self, model_config: pipeline_pb2.ModelConfig) -> Tuple[pipeline_pb2.DNN, str]:
        default, _ = super().attention_defaults(model_config)
        settings = model_config.din
        return (settings.attention_dnn if settings.HasField("attention_dnn") else default,
                settings.attention_normalizer)

    def logit(self, embeddings: Embeddings, first_order: Optional[tf.Tensor], dense: Optional[tf.Tensor],
              training: Any) -> tf.Tensor:
        inputs = tf.concat([self.group_input(name, embeddings, dense, training) for name in self.group_names], axis=1)
        return self.output_logit(self.din_dnn(inputs, training=training))[:, 0]
