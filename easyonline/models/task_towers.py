"""Task towers: what the multi-task models (MMoE, DBMTL, the backbone's MultiTaskModel) share.

A multi-task model gives each task tower an input and returns ``{tower name: logits}``. ``TaskTowers`` is
mixed into such a ``RankingModel`` (before it in the bases: ``class MMoE(TaskTowers, RankingModel)``) and
owns what EasyRec's ``multi_task_model.py`` owns for its family:

- the towers it declares (``tower_names``, ``towers``, ``tower_logits``), built from the settings' task
  towers: plain ones (``TaskTower``: a DNN and a logit, MMoE's) or Bayes ones (``BayesTaskTower``, DBMTL's:
  a DNN, a ``relation_dnn`` over it and the relation outputs of the towers it names, and a logit);
- ``deepfm_terms`` (not EasyRec's): DeepFM's first-order and FM terms, shared by the tasks, each task with
  its own scale of each, added to its logit; DNN experts learn an id's bias and the dot products of two
  ids' embeddings only slowly, from few samples.

The layers are built with the model's own ``mlp`` / ``logit_layer`` in tower order, so their names and
seeds, and with them the checkpoints and update streams of existing models, stay what they were.
"""
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.models.layers import FMInteraction
from easyonline.models.ranking_model import one_or_all
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()


class TaskTowers:
    """Mixin of a multi-task ``RankingModel``: its task towers and its optional DeepFM terms."""

    tower_names: List[str]
    towers: List[Any]  # each tower's DNN (an MLP)
    tower_logits: List[Any]  # each tower's logit layer
    deepfm_scales: Optional[Any] = None  # [2, tasks]: each task's scale of the first-order and the FM term

    if TYPE_CHECKING:  # what the mixin uses of RankingModel (declared for the type checker only)
        def mlp(self, dnn: pipeline_pb2.DNN, l2: float, name: str) -> Any: ...

        def logit_layer(self, l2: float, name: str, units: int = 1) -> Any: ...

        def linear_part(self, first_order: Any, dense: Any) -> Any: ...

        def add_weight(self, **kwargs: Any) -> Any: ...

    # --- plain towers (MMoE's) ------------------------------------------------------------------------
    def build_task_towers(self, towers: Sequence[pipeline_pb2.TaskTower], l2: float) -> None:
        """Each tower's DNN and logit (``num_class`` units: 2 for a JRC_LOSS tower)."""
        self.tower_names = [t.tower_name for t in towers]
        self.towers = [self.mlp(t.dnn, l2, f"{t.tower_name}_dnn") for t in towers]
        self.tower_logits = [self.logit_layer(l2, f"{t.tower_name}_logit", t.num_class) for t in towers]

    def task_tower_logits(self, inputs: Sequence[tf.Tensor], training: Any) -> Dict[str, tf.Tensor]:
        """{tower name: logits} of the plain towers, each over its input (``inputs``, in tower order)."""
        return {name: one_or_all(logit(tower(x, training=training)))
                for name, x, tower, logit in zip(self.tower_names, inputs, self.towers, self.tower_logits)}

    # --- Bayes towers (DBMTL's, the backbone MultiTaskModel's) -------------------------------------------
    def build_bayes_towers(self, towers: Sequence[pipeline_pb2.BayesTaskTower], l2: float) -> None:
        """Each tower's DNN, relation DNN and logit."""
        self.tower_names = [t.tower_name for t in towers]
        self.relations = [list(t.relation_tower_names) for t in towers]
        self.towers = [self.mlp(t.dnn, l2, f"{t.tower_name}_dnn") for t in towers]
        self.relation_dnns = [self.mlp(t.relation_dnn, l2, f"{t.tower_name}_relation_dnn") for t in towers]
        self.tower_logits = [self.logit_layer(l2, f"{t.tower_name}_logit", t.num_class) for t in towers]

    def bayes_logits(self, inputs: Sequence[tf.Tensor], training: Any) -> Dict[str, tf.Tensor]:
        """{tower name: logits} of the Bayes towers, each over its input (``inputs``, in tower order)."""
        relation: Dict[str, tf.Tensor] = {}
        logits: Dict[str, tf.Tensor] = {}
        for name, x, tower, relations, relation_dnn, logit in zip(
                self.tower_names, inputs, self.towers, self.relations, self.relation_dnns, self.tower_logits):
            parts = [tower(x, training=training)] + [relation[r] for r in relations]
            relation[name] = relation_dnn(tf.concat(parts, axis=1) if len(parts) > 1 else parts[0],
                                          training=training)
            logits[name] = one_or_all(logit(relation[name]))
        return logits

    # --- DeepFM terms ------------------------------------------------------------------------------------
    def build_deepfm_terms(self, tasks: int) -> None:
        """``deepfm_terms`` (the model's ``first_order_dim`` is then 1): the FM layer, and each task's scale of
        the first-order and of the FM term, both 1 at the start (see ``deepfm_term_logits``)."""
        self.fm = FMInteraction(name="fm")
        self.deepfm_scales = self.add_weight(name="deepfm_term_scales", shape=(2, tasks), initializer="ones")

    def with_deepfm_terms(self, logits: Dict[str, tf.Tensor], embeddings: Any, first_order: Any,
                          dense: Any) -> Dict[str, tf.Tensor]:
        """The logits by task name (in ``tower_names`` order) plus each task's DeepFM terms, when
        ``build_deepfm_terms`` was called; else ``logits`` as they are."""
        if self.deepfm_scales is None:
            return logits
        terms = self.deepfm_term_logits(embeddings, first_order, dense)
        return {name: logits[name] + terms[:, t] for t, name in enumerate(self.tower_names)}

    def deepfm_term_logits(self, embeddings: Any, first_order: Any, dense: Any) -> tf.Tensor:
        """[B, tasks]: column t is task t's share of DeepFM's first-order term (``linear_part``: the wide ids'
        weights and the wide raw features' linear part) and FM term (over the deep ids' embeddings), both
        shared by the tasks: what an id's ratings teach about its bias serves every task."""
        fm = self.fm(tf.stack(embeddings, axis=1))
        terms = tf.stack([self.linear_part(first_order, dense) + tf.zeros_like(fm), fm], axis=1)  # [B, 2]
        return tf.matmul(terms, self.deepfm_scales)
