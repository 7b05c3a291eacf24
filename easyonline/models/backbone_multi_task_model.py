"""MultiTaskModel (EasyRec's ``MultiTaskModel`` with a ``backbone``): RankModel's blocks, then task towers as
DBMTL's (``model_params.task_towers``: each tower's dnn, relation_dnn and logit).

Each tower reads the backbone's output: with ``top_mlp``, or one output block giving a tensor (or several
concatenated), every tower reads that one tensor; with ``output_blocks``, or one output block giving a list
(an MMoE layer's, one input per task), tower i reads the i-th (their number must be the towers'), as in
EasyRec's ``multi_task_model.py``. docs/models.md, "Backbone".
"""
from typing import Any, Dict, List, Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.errors import ConfigError
from easyonline.features.feature_spec import FeatureSpecs
from easyonline.models.backbone.graph import BlockGraph, BlockInputs
from easyonline.models.dbmtl import check_relations
from easyonline.models.backbone_rank_model import RankModel
from easyonline.models.base import Embeddings
from easyonline.models.registry import register
from easyonline.models.multi_task_model import MultiTaskModel
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()


def per_task_outputs(graph: BlockGraph, backbone: pipeline_pb2.Backbone) -> int:
    """How many inputs the backbone gives the towers one by one (0: one tensor for every tower); ConfigError
    when an output list's length is not known from the config (a list that is not an MMoE layer's)."""
    if backbone.HasField("top_mlp"):
        return 0
    blocks = {node.name: node for node in graph.blocks}
    counts = [_list_length(blocks[name]) if graph.kind(name) == "list" else 1 for name in graph.outputs]
    if backbone.output_blocks or (len(counts) == 1 and graph.kind(graph.outputs[0]) == "list"):
        return sum(counts)
    return 0


def _list_length(node: BlockInputs) -> int:
    """The tensors of a block giving a list: its MMoE layer's num_task."""
    mmoe = [layer for layer in node.keras_layers if layer.class_name == "MMoE"]
    if not mmoe or node.keras_layers[-1].class_name != "MMoE":
        raise ConfigError("model_config.backbone", f"block {node.name!r} gives a list the task towers would read "
                          "one by one, and only an MMoE layer's list has a known length (num_task): end the block "
                          "with an MMoE layer, or give the towers one tensor (concat_blocks of tensors, or top_mlp)")
    return mmoe[-1].mmoe.num_task


@register("multi_task_model", "MultiTaskModel", settings_field="model_params")
class BackboneMultiTaskModel(MultiTaskModel, RankModel):
    reads_task_towers = True

    @classmethod
    def validate_settings(cls, config: pipeline_pb2.PipelineConfig, path: str) -> None:
        graph = cls.validated_graph(config, path)
        towers = config.model_config.model_params.task_towers
        if not towers:
            raise ConfigError(f"{path}.task_towers", "MultiTaskModel needs at least one task tower")
        check_relations(towers, f"{path}.task_towers")
        given = per_task_outputs(graph, config.model_config.backbone)
        if given not in (0, 1, len(towers)):
            raise ConfigError("model_config.backbone", f"the backbone gives {given} outputs one by one (output "
                              f"blocks, or an MMoE layer's num_task) for {len(towers)} task towers: give as many, "
                              "or one tensor for every tower")

    def __init__(self, specs: FeatureSpecs, model_config: pipeline_pb2.ModelConfig, dnn: pipeline_pb2.DNN,
                 seed: int = 0, **kwargs: Any) -> None:
        super().__init__(specs, model_config, dnn, seed=seed, **kwargs)
        self.build_bayes_towers(list(model_config.model_params.task_towers), self.l2)
        self.one_by_one = per_task_outputs(self.graph, model_config.backbone) > 1

    def logits_from(self, embeddings: Embeddings, first_order: Optional[tf.Tensor], dense: Optional[tf.Tensor],
                    training: Any) -> Dict[str, tf.Tensor]:
        inputs: List[tf.Tensor] = self.backbone_outputs(embeddings, dense, training) if self.one_by_one else \
            [self.backbone_output(embeddings, dense, training)] * len(self.tower_names)
        return self.bayes_logits(inputs, training)
