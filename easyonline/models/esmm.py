"""ESMM (Ma et al. 2018, EasyRec's ``ESMM``): CVR learnt over every impression, through CTCVR = CTR x CVR.

The ``groups`` towers (a DNN per feature group; none: the group ``all``)
are concatenated; a CTR and a CVR tower (``TaskTower``: dnn, then a logit)
read them. The losses are EasyRec's: the CTR task's cross-entropy on the
click label, and the CTCVR task's cross-entropy of p_ctcvr = p_ctr * p_cvr
against click * conversion, over all impressions; the CVR tower has no loss
of its own (it learns through p_ctcvr).

How it fits the task contract (tasks/task.py): three tasks, the CTR tower's,
the CVR tower's (weight 0: an output only) and ``ctcvr``, a task whose
target is its label times another (``times_label``: the cvr label times the
ctr label), whose logit the model gives as logit(p_ctr * p_cvr), computed
from the two logits without forming the product (``product_logit``), so
the generic sigmoid cross-entropy is exactly EasyRec's CTCVR loss and stays
finite for any logits. A CVR tower of ``loss_type: L2_LOSS`` (EasyRec's
playtime variant) makes ``ctcvr`` a regression of y_cvr * p_ctr on
conversion value * click. Outputs: ``probs_<ctr>``, ``probs_<cvr>``,
``probs_ctcvr`` (and their ``logits_``; ``y_`` for a regression).
"""
from typing import Any, Dict, Optional, Sequence

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.errors import ConfigError
from easyonline.features.feature_spec import FeatureSpecs
from easyonline.models.base import Embeddings, Model
from easyonline.models.settings_checks import check_group
from easyonline.models.registry import register
from easyonline.protos import pipeline_pb2
from easyonline.tasks.from_config import BINARY_LOSSES, tower_task

tf = ensure_legacy_keras()
CTCVR = "ctcvr"


def product_logit(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """logit(sigmoid(a) * sigmoid(b)), stably: log p = log s(a) + log s(b), and
    1 - p = s(-a) + s(a) s(-b), so log(1 - p) = logsumexp(log s(-a), log s(a) + log s(-b))."""
    log_p = -tf.nn.softplus(-a) - tf.nn.softplus(-b)
    log_not_p = tf.reduce_logsumexp(tf.stack([-tf.nn.softplus(a), -tf.nn.softplus(-a) - tf.nn.softplus(b)]), axis=0)
    return log_p - log_not_p


@register("esmm", "ESMM")
class ESMM(Model):

    @classmethod
    def task_towers(cls, settings: Any) -> list:
        return [settings.ctr_tower, settings.cvr_tower] if settings is not None else []

    @classmethod
    def tasks_from_settings(cls, settings: Any, label_fields: Sequence[str], window_samples: int, path: str) -> list:
        """[ctr, cvr (output only), ctcvr]; a tower without a label_name takes the label field of its place
        in EasyRec's order (cvr first, then ctr)."""
        ctr, cvr = settings.ctr_tower, settings.cvr_tower
        ctr_task = tower_task(ctr, 1, label_fields, window_samples, f"{path}.ctr_tower")
        cvr_task = tower_task(cvr, 0, label_fields, window_samples, f"{path}.cvr_tower", weight=0.0)
        ctcvr_task = tower_task(cvr, 0, label_fields, window_samples, f"{path}.cvr_tower", name=CTCVR,
                                times_label=ctr_task.label_name)
        return [ctr_task, cvr_task, ctcvr_task]

    @classmethod
    def validate_settings(cls, config: pipeline_pb2.PipelineConfig, path: str) -> None:
        settings = config.model_config.esmm
        for field in ("ctr_tower", "cvr_tower"):
            if not settings.HasField(field):
                raise ConfigError(f"{path}.{field}", "is required")
            if getattr(settings, field).losses:
                raise ConfigError(f"{path}.{field}.losses", "ESMM's losses are its own (the CTR and the CTCVR "
                                  "cross-entropy): use loss_type")
        if settings.ctr_tower.loss_type not in BINARY_LOSSES:
            raise ConfigError(f"{path}.ctr_tower.loss_type", "the CTR tower is a click probability: CLASSIFICATION")
        names = [settings.ctr_tower.tower_name, settings.cvr_tower.tower_name]
        if CTCVR in names or names[0] == names[1]:
            raise ConfigError(f"{path}.cvr_tower.tower_name", f"the towers' names {names} must differ from each "
                              f"other and from {CTCVR!r} (the product's outputs)")
        for i, tower in enumerate(settings.groups):
            check_group(config, tower.input, f"{path}.groups[{i}].input")
        if not settings.groups:
            check_group(config, "all", "model_config.feature_groups")

    def __init__(self, specs: FeatureSpecs, model_config: pipeline_pb2.ModelConfig, dnn: pipeline_pb2.DNN,
                 seed: int = 0, **kwargs: Any) -> None:
        super().__init__(specs, model_config, dnn, seed=seed, **kwargs)
        settings = model_config.esmm
        l2 = model_config.l2_regularization or settings.l2_regularization
        self.group_names = [tower.input for tower in settings.groups]
        self.group_dnns = [self.mlp(tower.dnn, l2, f"{tower.input}_dnn") for tower in settings.groups]
        self.ctr_name, self.cvr_name = settings.ctr_tower.tower_name, settings.cvr_tower.tower_name
        self.ctr_dnn = self.mlp(settings.ctr_tower.dnn, l2, "ctr_dnn")
        self.ctr_logit = self.logit_layer(l2, "ctr_logit")
        self.cvr_dnn = self.mlp(settings.cvr_tower.dnn, l2, "cvr_dnn")
        self.cvr_logit = self.logit_layer(l2, "cvr_logit")
        self.cvr_is_binary = settings.cvr_tower.loss_type in BINARY_LOSSES

    def logits_from(self, embeddings: Embeddings, first_order: Optional[tf.Tensor], dense: Optional[tf.Tensor],
                    training: Any) -> Dict[str, tf.Tensor]:
        if self.group_names:
            shared = tf.concat([tower(self.group_input(name, embeddings, dense, training), training=training)
                                for name, tower in zip(self.group_names, self.group_dnns)], axis=1)
        else:
            shared = self.group_input("all", embeddings, dense, training)
        ctr = self.ctr_logit(self.ctr_dnn(shared, training=training))[:, 0]
        cvr = self.cvr_logit(self.cvr_dnn(shared, training=training))[:, 0]
        ctcvr = product_logit(ctr, cvr) if self.cvr_is_binary else cvr * tf.sigmoid(ctr)
        return {self.ctr_name: ctr, self.cvr_name: cvr, CTCVR: ctcvr}
