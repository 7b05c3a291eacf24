"""The base of the multi-task models (MMoE, DBMTL, PLE, the backbone's MultiTaskModel): task towers.

A multi-task model gives each task tower an input and returns ``{tower name: logits}``; one task per tower
(tasks/from_config.py). ``MultiTaskModel`` owns what EasyRec's ``multi_task_model.py`` owns for its family:

- the towers it declares (``tower_names``, ``towers``, ``tower_logits``), built from the settings' task
  towers: plain ones (``build_task_towers``: a DNN and a logit, MMoE's and PLE's) or Bayes ones
  (``build_bayes_towers``, DBMTL's: a DNN, a ``relation_dnn`` over it and the relation outputs of the towers
  it names, and a logit);
- ``deepfm_terms`` (deepfm_terms.py; not EasyRec's): DeepFM's first-order and FM terms added to each task's
  logit, each task with its own scale of each.

The layers are built with the model's own ``mlp`` / ``logit_layer`` in tower order, so their names and
seeds, and with them the checkpoints and update streams of existing models, stay what they were.
A subclass builds its shared part and its towers in ``__init__`` and implements ``logits_from``.
"""
from typing import Any, Dict, List, Sequence

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.models.base import Model, one_or_all
from easyonline.models.deepfm_terms import DeepFMTerms
from easyonline.models.layers import MLP
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()


class MultiTaskModel(DeepFMTerms, Model):
    """A model of task towers: ``call(features) -> {tower name: logits}``."""

    tower_names: List[str]  # the towers, in the settings' order (one task each)
    towers: List[MLP]  # each tower's DNN
    tower_logits: List[Any]  # each tower's logit layer (a Dense of num_class units)
    relations: List[List[str]]  # Bayes towers: the towers each one reads the relation output of
    relation_dnns: List[MLP]  # Bayes towers: each one's relation DNN

    # --- plain towers (MMoE's, PLE's) ---------------------------------------------------------------
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
