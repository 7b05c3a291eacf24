"""MMoE (Ma et al. 2018, EasyRec's ``MMoE``): shared experts mixed per task by a softmax gate, then each task
tower's DNN and its logit.

Reads the feature group ``all`` (every deep feature when no group has that
name). ``expert_dnn`` x ``num_expert`` experts, or EasyRec's deprecated
``experts`` list (one expert per entry) when ``expert_dnn`` is not set.
``call`` returns {tower name: logits [B]}; each tower is a task
(tasks/from_config.py), its outputs ``probs_<tower>``/``y_<tower>``.

``deepfm_terms`` (not EasyRec's) adds to each task's logit DeepFM's
first-order and FM terms, shared by the tasks, each task with its own scale
(deepfm_terms.py): DNN experts learn an id's bias and
the dot products of two ids' embeddings only slowly, from few samples.
"""
from typing import Any, Dict, Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.errors import ConfigError
from easyonline.features.feature_spec import FeatureSpecs
from easyonline.models.layers import ExpertMixture
from easyonline.models.base import Embeddings
from easyonline.models.settings_checks import check_deepfm_terms, check_group
from easyonline.models.registry import register
from easyonline.models.multi_task_model import MultiTaskModel
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()


@register("mmoe", "MMoE")
class MMoE(MultiTaskModel):

    @classmethod
    def validate_settings(cls, config: pipeline_pb2.PipelineConfig, path: str) -> None:
        settings = config.model_config.mmoe
        if not settings.task_towers:
            raise ConfigError(f"{path}.task_towers", "MMoE needs at least one task tower")
        if settings.HasField("expert_dnn"):
            if settings.num_expert < 1:
                raise ConfigError(f"{path}.num_expert", f"must be >= 1 with expert_dnn, got {settings.num_expert}")
        elif not settings.experts:
            raise ConfigError(f"{path}.expert_dnn", "is required (with num_expert), or the experts list")
        check_group(config, "all", "model_config.feature_groups")
        if settings.deepfm_terms:
            check_deepfm_terms(config, f"{path}.deepfm_terms", settings.task_towers)

    def __init__(self, specs: FeatureSpecs, model_config: pipeline_pb2.ModelConfig, dnn: pipeline_pb2.DNN,
                 seed: int = 0, **kwargs: Any) -> None:
        super().__init__(specs, model_config, dnn, seed=seed, **kwargs)
        settings = model_config.mmoe
        l2 = model_config.l2_regularization or settings.l2_regularization
        expert_dnns = [settings.expert_dnn] * settings.num_expert if settings.HasField("expert_dnn") \
            else [expert.dnn for expert in settings.experts]
        self.mixture = ExpertMixture([self.mlp(d, l2, f"expert_{i}") for i, d in enumerate(expert_dnns)],
                                     len(settings.task_towers), l2, seed=seed + 300, name="mmoe")
        self.build_task_towers(settings.task_towers, l2)
        if settings.deepfm_terms:
            self.build_deepfm_terms(len(self.tower_names))

    def first_order_dim(self, model_config: pipeline_pb2.ModelConfig) -> int:
        settings = model_config.mmoe
        return 1 if settings.deepfm_terms else 0

    def logits_from(self, embeddings: Embeddings, first_order: Optional[tf.Tensor], dense: Optional[tf.Tensor],
                    training: Any) -> Dict[str, tf.Tensor]:
        inputs = self.mixture(self.group_input("all", embeddings, dense, training), training=training)
        logits = self.task_tower_logits(inputs, training)
        return self.with_deepfm_terms(logits, embeddings, first_order, dense)
