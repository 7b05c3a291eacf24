"""DCN (Deep & Cross Network, Wang et al. 2017, EasyRec's ``DCN``): a deep tower and a cross network side by
side, concatenated, then ``final_dnn`` and one logit (the task of ``model_config.loss_type``).

``deep_tower { input dnn }`` is a DNN over its feature group;
``cross_tower { input cross_num }`` is ``cross_num`` cross layers over its
group, x_{l+1} = x0 * (w_l . x_l) + b_l + x_l (each layer a weight vector
w_l and a bias b_l as wide as the input). EasyRec's samples give both
towers the group ``all``.
"""
from typing import Any, Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.errors import ConfigError
from easyonline.features.feature_spec import FeatureSpecs
from easyonline.models.base import Embeddings
from easyonline.models.ranking_model import RankingModel
from easyonline.models.settings_checks import check_group
from easyonline.models.registry import register
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()


class CrossNet(tf.keras.layers.Layer):
    """``num_layers`` cross layers: x_{l+1} = x0 * (x_l . w_l) + b_l + x_l, for x [B, d]."""

    def __init__(self, num_layers: int, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_layers, self.seed = num_layers, seed
        self.kernels: list = []
        self.biases: list = []

    def build(self, input_shape: tf.TensorShape) -> None:
        width = int(input_shape[-1])
        for i in range(self.num_layers):
            self.kernels.append(self.add_weight(
                name=f"cross_{i}_w", shape=(width,),
                initializer=tf.keras.initializers.GlorotUniform(seed=self.seed + i)))
            self.biases.append(self.add_weight(name=f"cross_{i}_b", shape=(width,), initializer="zeros"))
        super().build(input_shape)

    def call(self, x0: tf.Tensor) -> tf.Tensor:
        x = x0
        for w, b in zip(self.kernels, self.biases):
            x = x0 * tf.reduce_sum(x * w, axis=1, keepdims=True) + b + x
        return x


@register("dcn", "DCN")
class DCN(RankingModel):
    global_bias = False  # the output layer has its bias

    @classmethod
    def validate_settings(cls, config: pipeline_pb2.PipelineConfig, path: str) -> None:
        settings = config.model_config.dcn
        for field in ("deep_tower", "cross_tower"):
            if not settings.HasField(field):
                raise ConfigError(f"{path}.{field}", "is required")
            check_group(config, getattr(settings, field).input, f"{path}.{field}.input")
        if settings.cross_tower.cross_num < 1:
            raise ConfigError(f"{path}.cross_tower.cross_num", f"must be >= 1, got {settings.cross_tower.cross_num}")

    def __init__(self, specs: FeatureSpecs, model_config: pipeline_pb2.ModelConfig, dnn: pipeline_pb2.DNN,
                 seed: int = 0, **kwargs: Any) -> None:
        super().__init__(specs, model_config, dnn, seed=seed, **kwargs)
        settings = model_config.dcn
        l2 = model_config.l2_regularization or settings.l2_regularization
        self.deep_group, self.cross_group = settings.deep_tower.input, settings.cross_tower.input
        self.deep_dnn = self.mlp(settings.deep_tower.dnn, l2, "deep_dnn")
        self.cross = CrossNet(settings.cross_tower.cross_num, seed=seed + 400, name="cross")
        self.final = self.mlp(settings.final_dnn, l2, "final_dnn")
        self.output_logit = self.logit_layer(0.0, "output")

    def logit(self, embeddings: Embeddings, first_order: Optional[tf.Tensor], dense: Optional[tf.Tensor],
              training: Any) -> tf.Tensor:
        deep = self.deep_dnn(self.group_input(self.deep_group, embeddings, dense, training), training=training)
        cross = self.cross(self.group_input(self.cross_group, embeddings, dense, training))
        return self.output_logit(self.final(tf.concat([deep, cross], axis=1), training=training))[:, 0]
