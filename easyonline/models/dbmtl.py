"""DBMTL (Deep Bayesian Multi-Target Learning, EasyRec's ``DBMTL``): each task's output also reads the
outputs of the tasks it depends on (``relation_tower_names``), e.g. conversion given click.

Over the feature group ``all``: an optional ``bottom_dnn``, optional MMoE
experts (``expert_dnn`` x ``num_expert``, a gate per task); then per task
tower (``BayesTaskTower``, in order) its ``dnn``, its ``relation_dnn`` over
[its dnn output, the relation_dnn outputs of the towers it names], and its
logit. A tower names only towers before it. ``call`` returns {tower name:
logits [B]}. ``deepfm_terms`` (not EasyRec's) adds to each task's logit
DeepFM's terms, as MMoE's.
"""
from typing import Any, Dict, Optional, Sequence, Set

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


def check_relations(towers: Sequence[pipeline_pb2.BayesTaskTower], path: str) -> None:
    """ConfigError unless each tower's relation_tower_names name towers before it (``path``: the towers')."""
    earlier: Set[str] = set()
    for i, tower in enumerate(towers):
        for j, name in enumerate(tower.relation_tower_names):
            if name not in earlier:
                raise ConfigError(f"{path}[{i}].relation_tower_names[{j}]",
                                  f"{name!r} is not a tower before {tower.tower_name!r} (towers read the "
                                  f"relation outputs of earlier towers only: {sorted(earlier)})")
        earlier.add(tower.tower_name)


@register("dbmtl", "DBMTL")
class DBMTL(MultiTaskModel):

    @classmethod
    def validate_settings(cls, config: pipeline_pb2.PipelineConfig, path: str) -> None:
        settings = config.model_config.dbmtl
        if not settings.task_towers:
            raise ConfigError(f"{path}.task_towers", "DBMTL needs at least one task tower")
        if settings.HasField("expert_dnn") and settings.num_expert < 1:
            raise ConfigError(f"{path}.num_expert", f"must be >= 1 with expert_dnn, got {settings.num_expert}")
        check_relations(settings.task_towers, f"{path}.task_towers")
        check_group(config, "all", "model_config.feature_groups")
        if settings.deepfm_terms:
            check_deepfm_terms(config, f"{path}.deepfm_terms", settings.task_towers)

    def __init__(self, specs: FeatureSpecs, model_config: pipeline_pb2.ModelConfig, dnn: pipeline_pb2.DNN,
                 seed: int = 0, **kwargs: Any) -> None:
        super().__init__(specs, model_config, dnn, seed=seed, **kwargs)
        settings = model_config.dbmtl
        l2 = model_config.l2_regularization or settings.l2_regularization
        towers = list(settings.task_towers)
        self.bottom = self.mlp(settings.bottom_dnn, l2, "bottom_dnn")  # (not set: no layers, the input itself)
        self.mixture = ExpertMixture([self.mlp(settings.expert_dnn, l2, f"expert_{i}")
                                      for i in range(settings.num_expert)], len(towers), l2, seed=seed + 300,
                                     name="mmoe") if settings.HasField("expert_dnn") else None
        self.build_bayes_towers(towers, l2)
        if settings.deepfm_terms:
            self.build_deepfm_terms(len(self.tower_names))

    def first_order_dim(self, model_config: pipeline_pb2.ModelConfig) -> int:
        settings = model_config.dbmtl
        return 1 if settings.deepfm_terms else 0

    def logits_from(self, embeddings: Embeddings, first_order: Optional[tf.Tensor], dense: Optional[tf.Tensor],
                    training: Any) -> Dict[str, tf.Tensor]:
        bottom = self.bottom(self.group_input("all", embeddings, dense, training), training=training)
        inputs = self.mixture(bottom, training=training) if self.mixture is not None \
            else [bottom] * len(self.tower_names)
        return self.with_deepfm_terms(self.bayes_logits(inputs, training), embeddings, first_order, dense)
