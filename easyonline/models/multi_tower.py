"""MultiTower (EasyRec's ``MultiTower``): a DNN per feature group, concatenated, then ``final_dnn`` and one logit.

Each tower (``towers { input: <group> dnn {...} }``) batch-normalizes its
group's input (EasyRec's ``<group>_fea_bn``) before its DNN; the towers'
outputs are concatenated and ``final_dnn`` (not set: no layers) plus a
1-unit layer gives the logit of the model's one task
(``model_config.loss_type``).
"""
from typing import Any, Optional, Union

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.errors import ConfigError
from easyonline.features.feature_spec import FeatureSpecs
from easyonline.models.layers import BatchNorm
from easyonline.models.base import Embeddings
from easyonline.models.ranking_model import RankingModel
from easyonline.models.settings_checks import check_group
from easyonline.models.registry import register
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()


@register("multi_tower", "MultiTower")
class MultiTower(RankingModel):
    global_bias = False  # the output layer has its bias
    settings_field = "multi_tower"  # (MultiTowerDIN's are multi_tower_din)

    @classmethod
    def validate_settings(cls, config: pipeline_pb2.PipelineConfig, path: str) -> None:
        settings = getattr(config.model_config, cls.settings_field)
        if not settings.towers:
            raise ConfigError(f"{path}.towers", f"{cls.__name__} needs at least one tower {{ input dnn }}")
        for i, tower in enumerate(settings.towers):
            check_group(config, tower.input, f"{path}.towers[{i}].input")

    def __init__(self, specs: FeatureSpecs, model_config: pipeline_pb2.ModelConfig, dnn: pipeline_pb2.DNN,
                 seed: int = 0, **kwargs: Any) -> None:
        super().__init__(specs, model_config, dnn, seed=seed, **kwargs)
        settings = getattr(model_config, self.settings_field)
        l2 = model_config.l2_regularization or settings.l2_regularization
        self.l2 = l2
        self.group_names = [tower.input for tower in settings.towers]
        self.input_norms = [BatchNorm(name=f"{tower.input}_fea_bn")
                            for tower in settings.towers]
        self.use_bn = True  # (the input norms: scores are taken in a separate inference pass)
        self.tower_dnns = [self.mlp(tower.dnn, l2, f"{tower.input}_dnn") for tower in settings.towers]
        self.build_extra_towers(settings)
        self.final = self.mlp(settings.final_dnn, l2, "final_dnn")
        self.output_logit = self.logit_layer(0.0, "output")

    def build_extra_towers(self, settings: Union[pipeline_pb2.MultiTower, pipeline_pb2.MultiTowerDIN,
                                                 pipeline_pb2.MultiTowerBST]) -> None:
        """A subclass's own towers, built before final_dnn (MultiTowerDIN's din_towers)."""

    def tower_outputs(self, embeddings: Embeddings, dense: Optional[tf.Tensor], training: Any) -> list:
        return [tower(norm(self.group_input(name, embeddings, dense, training), training=training), training=training)
                for name, norm, tower in zip(self.group_names, self.input_norms, self.tower_dnns)]

    def logit(self, embeddings: Embeddings, first_order: Optional[tf.Tensor], dense: Optional[tf.Tensor],
              training: Any) -> tf.Tensor:
        towers = self.tower_outputs(embeddings, dense, training)
        return self.output_logit(self.final(tf.concat(towers, axis=1), training=training))[:, 0]
