"""PLE (Progressive Layered Extraction, Tang et al. 2020; EasyRec's ``PLE``): experts of each task and shared
experts, mixed per task by gates, layer after layer, then each task tower's DNN and its logit.

Reads the feature group ``all`` (every deep feature when no group has that
name). Each of the ``extraction_networks``, in order, is one extraction
layer (the paper's CGC): every task has ``expert_num_per_task`` experts
(``task_expert_net``) over its own input and there are ``share_num`` shared
experts (``share_expert_net``) over the shared input; a task's output is its
softmax gate's mix of its own and the shared experts, the shared output (not
made by the last layer) the shared gate's mix of every expert. The first
layer's inputs are all the group's input; the last layer's task outputs feed
the task towers. ``call`` returns {tower name: logits [B]}; each tower is a
task (tasks/from_config.py), its outputs ``probs_<tower>``/``y_<tower>``.

Where MMoE's tasks share every expert, PLE's tasks also keep experts of
their own, so a task whose label disagrees with the others' (the paper's
"seesaw") does not have to fight them for the same experts.
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.errors import ConfigError
from easyonline.features.feature_spec import FeatureSpecs
from easyonline.models.layers import gate_layer, softmax_mix
from easyonline.models.registry import register
from easyonline.models.settings_checks import check_group
from easyonline.models.multi_task_model import MultiTaskModel
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()


class ExtractionLayer(tf.keras.layers.Layer):
    """One extraction network: each task's experts and the shared experts, a gate per task (over the task's
    experts and the shared ones) and, unless it is the last layer, a shared gate (over every expert)."""

    def __init__(self, task_experts: Sequence[Sequence[Any]], shared_experts: Sequence[Any], last: bool,
                 l2: float, seed: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.task_experts = [list(experts) for experts in task_experts]
        self.shared_experts = list(shared_experts)
        self.task_gates = [gate_layer(len(experts) + len(self.shared_experts), l2, seed + t, f"task_{t}_gate")
                           for t, experts in enumerate(self.task_experts)]
        every = sum(len(experts) for experts in self.task_experts) + len(self.shared_experts)
        self.shared_gate = None if last else gate_layer(every, l2, seed + len(self.task_experts), "share_gate")

    def call(self, task_inputs: Sequence[tf.Tensor], shared_input: tf.Tensor, training: Any = False
             ) -> Tuple[List[tf.Tensor], Optional[tf.Tensor]]:
        """(each task's output [B, d], the shared output [B, d] or None after the last layer)."""
        shared = [expert(shared_input, training=training) for expert in self.shared_experts]
        outputs, every = [], []
        for x, experts, gate in zip(task_inputs, self.task_experts, self.task_gates):
            own = [expert(x, training=training) for expert in experts]
            every.extend(own)
            outputs.append(softmax_mix(gate, x, tf.stack(own + shared, axis=1)))
        return outputs, (softmax_mix(self.shared_gate, shared_input, tf.stack(every + shared, axis=1))
                         if self.shared_gate is not None else None)


@register("ple", "PLE")
class PLE(MultiTaskModel):

    @classmethod
    def validate_settings(cls, config: pipeline_pb2.PipelineConfig, path: str) -> None:
        settings = config.model_config.ple
        if not settings.task_towers:
            raise ConfigError(f"{path}.task_towers", "PLE needs at least one task tower")
        if not settings.extraction_networks:
            raise ConfigError(f"{path}.extraction_networks", "PLE needs at least one extraction network")
        for i, network in enumerate(settings.extraction_networks):
            where = f"{path}.extraction_networks[{i}]"
            if network.expert_num_per_task < 1:
                raise ConfigError(f"{where}.expert_num_per_task", f"must be >= 1, got {network.expert_num_per_task}")
            if not network.task_expert_net.hidden_units:
                raise ConfigError(f"{where}.task_expert_net.hidden_units", "is required (the task experts' DNN)")
            if network.share_num and not network.share_expert_net.hidden_units:
                raise ConfigError(f"{where}.share_expert_net.hidden_units",
                                  f"is required with share_num {network.share_num} (the shared experts' DNN)")
            width = network.task_expert_net.hidden_units[-1]
            if network.share_num and network.share_expert_net.hidden_units[-1] != width:
                raise ConfigError(f"{where}.share_expert_net.hidden_units",
                                  f"must end in the task experts' width {width} (the gates mix both), got "
                                  f"{network.share_expert_net.hidden_units[-1]}")
        check_group(config, "all", "model_config.feature_groups")

    def __init__(self, specs: FeatureSpecs, model_config: pipeline_pb2.ModelConfig, dnn: pipeline_pb2.DNN,
                 seed: int = 0, **kwargs: Any) -> None:
        super().__init__(specs, model_config, dnn, seed=seed, **kwargs)
        settings = model_config.ple
        l2 = model_config.l2_regularization or settings.l2_regularization
        tasks = len(settings.task_towers)
        networks = list(settings.extraction_networks)
        self.extraction = [
            ExtractionLayer([[self.mlp(n.task_expert_net, l2, f"{n.network_name}_task_{t}_expert_{e}")
                              for e in range(n.expert_num_per_task)] for t in range(tasks)],
                            [self.mlp(n.share_expert_net, l2, f"{n.network_name}_share_expert_{e}")
                             for e in range(n.share_num)],
                            last=i == len(networks) - 1, l2=l2, seed=seed + 300 + 100 * i,
                            name=n.network_name or f"extraction_{i}")
            for i, n in enumerate(networks)]
        self.build_task_towers(settings.task_towers, l2)

    def logits_from(self, embeddings: List[tf.Tensor], first_order: Any, dense: Optional[tf.Tensor],
                    training: Any) -> Dict[str, tf.Tensor]:
        x = self.group_input("all", embeddings, dense, training)
        tasks: List[tf.Tensor] = [x] * len(self.tower_names)
        shared: Optional[tf.Tensor] = x
        for layer in self.extraction:
            tasks, shared = layer(tasks, shared, training=training)
        return self.task_tower_logits(tasks, training)
