"""RankModel (EasyRec's ``RankModel`` with a ``backbone``): a graph of blocks over feature groups, their outputs
concatenated, ``top_mlp``, and one logit.

Blocks (models/backbone/graph.py) read feature groups through input layers, or other blocks; their layers are
EasyRec's MLP, DIN (target attention, models/target_attention.py) and BST (models/backbone/
bst_encoder.py). A group a DIN or BST layer reads lists its SequenceFeatures and its target features together
and an input layer reads it with ``output_seq_and_normal_feature`` (the parsers then check that its sequences'
positions line up, as a target attention's). EasyRec's samples ``din_backbone_on_taobao`` and
``bst_backbone_on_taobao`` are of this form. docs/models.md, "Backbone".
"""
from typing import Any, Callable, Dict, List, Optional, Tuple

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.errors import ConfigError
from easyonline.features.feature_spec import FeatureSpecs, sequence_feature_names
from easyonline.models.backbone.bst_encoder import BSTEncoder
from easyonline.models.backbone.contrastive import AuxiliaryLoss, SeqAugment, auxiliary_loss_of
from easyonline.models.backbone.cross import Cross
from easyonline.models.backbone.graph import BlockGraph, BlockInputs, Source, block_graph
from easyonline.models.backbone.masknet import MaskNet
from easyonline.models.backbone.senet import SENet
from easyonline.models.layers import MLP, BatchNorm, ExpertMixture, initializer_of
from easyonline.models.target_attention import TargetAttention
from easyonline.models.base import Embeddings, one_or_all
from easyonline.models.ranking_model import RankingModel
from easyonline.models.registry import register
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()

# Where a block of a package reads its inputs (``backbone_outputs``): (the package's blocks by name, the input the
# package was called with, the value of one of its blocks by name); None: the backbone's own blocks.
_Scope = Optional[Tuple[Dict[str, BlockInputs], Any, Callable[[str], Any]]]


@register("rank_model", "RankModel", settings_field="model_params")
class RankModel(RankingModel):
    global_bias = False  # the output layer has its bias
    reads_task_towers = False  # (MultiTaskModel's do)

    @classmethod
    def validate_settings(cls, config: pipeline_pb2.PipelineConfig, path: str) -> None:
        cls.validated_graph(config, path)

    @classmethod
    def validated_graph(cls, config: pipeline_pb2.PipelineConfig, path: str) -> BlockGraph:
        """The backbone's graph; ConfigError naming the field of anything that cannot run."""
        model = config.model_config
        if not model.HasField("backbone"):
            raise ConfigError("model_config.backbone", f"{cls.__name__} is EasyRec's backbone model: give "
                              "model_config.backbone { blocks { ... } }")
        if model.model_params.l2_regularization < 0:
            raise ConfigError(f"{path}.l2_regularization", "must be >= 0")
        if model.model_params.task_towers and not cls.reads_task_towers:
            raise ConfigError(f"{path}.task_towers", "task towers are MultiTaskModel's (model_class "
                              "\"MultiTaskModel\"); a RankModel has one task, of model_config.loss_type")
        names = sequence_feature_names(config)
        dims = {f.feature_name or f.input_names[0]: f.embedding_dim or
                (max(f.raw_input_dim, 1) if f.feature_type == pipeline_pb2.FeatureConfig.RawFeature else 0)
                for f in config.feature_configs}  # (a raw feature's width: its columns)
        return block_graph(model.backbone, {g.group_name: g for g in model.feature_groups if g.group_name}, names,
                           dims)

    def __init__(self, specs: FeatureSpecs, model_config: pipeline_pb2.ModelConfig, dnn: pipeline_pb2.DNN,
                 seed: int = 0, **kwargs: Any) -> None:
        super().__init__(specs, model_config, dnn, seed=seed, **kwargs)
        self.l2 = model_config.l2_regularization or model_config.model_params.l2_regularization
        widths = {f.name: self.tables.table_dim(f.table) for f in specs.id_features}
        self._group_config = {g.group_name: g for g in model_config.feature_groups}
        self._raw_widths = {f.name: f.dim for f in specs.raw_features}
        self.augments = False
        self.graph = block_graph(model_config.backbone, self._group_config,
                                 [f.name for f in specs.id_features if f.sequence], widths)
        self.block_layers: Dict[str, List] = {node.name: self._layers_of(node, widths) for node in self.graph.order}
        backbone = model_config.backbone
        self.top_mlp = self.easyrec_mlp(backbone.top_mlp, "top_mlp") if backbone.HasField("top_mlp") else None
        self.output_logit = self.logit_layer(0.0, "output")

    @property
    def scores_differ_in_training(self) -> bool:
        return super().scores_differ_in_training or self.augments

    def easyrec_mlp(self, settings: pipeline_pb2.MLP, name: str, drop_last: bool = False) -> MLP:
        """An MLP layer of EasyRec's settings (``drop_last``: all but its last layer, DIN's hidden layers)."""
        units = list(settings.hidden_units)[:-1] if drop_last else list(settings.hidden_units)
        self._built_mlps += 1
        self.dropout_ratio = max([self.dropout_ratio] + list(settings.dropout_ratio)[:len(units)])
        self.use_bn = self.use_bn or settings.use_bn or settings.activation == "dice" or \
            (settings.use_final_bn and not drop_last)
        return MLP(units, settings.activation, list(settings.dropout_ratio), settings.use_bn, self.l2,
                   seed=self._seed + 1000 * self._built_mlps,
                   final_activation=None if drop_last else (settings.final_activation or "linear"),
                   use_final_bn=None if drop_last else settings.use_final_bn, use_bias=settings.use_bias,
                   use_final_bias=None if drop_last else settings.use_final_bias,
                   initializer=settings.initializer, bn_after_activation=settings.use_bn_after_activation, name=name)

    def _layers_of(self, node: BlockInputs, widths: Dict[str, int]) -> list:
        block = node.block
        if node.layer == "input_layer":
            settings = block.input_layer
            layers: list = []
            if settings.do_batch_norm:
                layers.append(BatchNorm(name=f"{block.name}_bn"))
                self.use_bn = True
            if settings.do_layer_norm:
                layers.append(tf.keras.layers.LayerNormalization(name=f"{block.name}_ln"))
            if settings.dropout_rate > 0:
                layers.append(tf.keras.layers.Dropout(settings.dropout_rate, seed=self._seed))
                self.dropout_ratio = max(self.dropout_ratio, settings.dropout_rate)
            return layers
        if node.layer == "keras_layer":
            return [self._keras_layer(block.keras_layer, node, widths, block.name)]
        if node.layer == "recurrent":  # (a Cross layer per step, each with weights of its own)
            self._built_mlps += 1
            return [Cross(self.l2, seed=self._seed + 1000 * self._built_mlps + i, name=f"{block.name}_{i}")
                    for i in range(block.recurrent.num_steps)]
        if node.layer == "layers":
            return [self._keras_layer(item.keras_layer, node, widths, f"{block.name}_l{k}")
                    for k, item in enumerate(block.layers)]
        return []  # identity: the inputs concatenated

    def _keras_layer(self, keras: pipeline_pb2.KerasLayer, node: BlockInputs, widths: Dict[str, int],
                     name: str) -> tf.keras.layers.Layer:
        """The layer of a keras_layer block, by its class_name's builder (``BLOCK_BUILDERS``)."""
        return BLOCK_BUILDERS[keras.class_name](self, keras, node, widths, name)

    def _mlp_block(self, keras: pipeline_pb2.KerasLayer, node: BlockInputs, widths: Dict[str, int], name: str) -> MLP:
        return self.easyrec_mlp(keras.mlp, name)

    def _mmoe_block(self, keras: pipeline_pb2.KerasLayer, node: BlockInputs, widths: Dict[str, int],
                    name: str) -> ExpertMixture:
        settings = keras.mmoe
        experts = [self.easyrec_mlp(settings.expert_mlp, f"{name}_expert_{i}") for i in range(settings.num_expert)]
        self._built_mlps += 1
        return ExpertMixture(experts, settings.num_task, self.l2, seed=self._seed + 1000 * self._built_mlps, name=name)

    def _masknet_block(self, keras: pipeline_pb2.KerasLayer, node: BlockInputs, widths: Dict[str, int],
                       name: str) -> MaskNet:
        settings = keras.masknet
        mlp = self.easyrec_mlp(settings.mlp, f"{name}_mlp") if settings.HasField("mlp") else None
        self._built_mlps += 1
        return MaskNet(settings, mlp, self.l2, seed=self._seed + 1000 * self._built_mlps, name=name)

    def _senet_block(self, keras: pipeline_pb2.KerasLayer, node: BlockInputs, widths: Dict[str, int],
                     name: str) -> SENet:
        names = list(self._group_config[self.graph.group_read(node.name)].feature_names)
        self._built_mlps += 1
        return SENet(keras.senet, len(names), sum(self._feature_width(n, widths) for n in names),
                     seed=self._seed + 1000 * self._built_mlps, name=name)

    def _auxiliary_loss_block(self, keras: pipeline_pb2.KerasLayer, node: BlockInputs, widths: Dict[str, int],
                              name: str) -> AuxiliaryLoss:
        return auxiliary_loss_of(keras.st_params)

    def _sequence_widths(self, node: BlockInputs, widths: Dict[str, int]) -> Tuple[int, int]:
        """(the target features' width, the sequences' width) of the sequence group ``node`` reads."""
        group = self.sequence_groups[self.graph.group_read(node.name)]
        return sum(widths[k] for k in group.keys), sum(widths[h] for h in group.hist_seqs)

    def _seq_augment_block(self, keras: pipeline_pb2.KerasLayer, node: BlockInputs, widths: Dict[str, int],
                           name: str) -> SeqAugment:
        _, width = self._sequence_widths(node, widths)
        self.augments = True  # (scores in training may read a random view)
        return SeqAugment(keras.seq_aug, width, name=name)

    def _din_block(self, keras: pipeline_pb2.KerasLayer, node: BlockInputs, widths: Dict[str, int],
                   name: str) -> TargetAttention:
        target, width = self._sequence_widths(node, widths)
        settings = keras.din
        self._built_mlps += 1
        score = tf.keras.layers.Dense(1, name=f"{name}_score", kernel_initializer=initializer_of(
            settings.attention_dnn.initializer, self._seed + 1000 * self._built_mlps),
            kernel_regularizer=tf.keras.regularizers.l2(self.l2) if self.l2 > 0 else None)
        return TargetAttention(self.easyrec_mlp(settings.attention_dnn, f"{name}_attention", drop_last=True),
                               score, settings.attention_normalizer, settings.need_target_feature, target, width,
                               transform="pad" if target < width else "", name=name)

    def _bst_block(self, keras: pipeline_pb2.KerasLayer, node: BlockInputs, widths: Dict[str, int],
                   name: str) -> BSTEncoder:
        target, width = self._sequence_widths(node, widths)
        settings = keras.bst
        self._built_mlps += 1
        self.dropout_ratio = max(self.dropout_ratio, settings.hidden_dropout_prob,
                                 settings.attention_probs_dropout_prob)
        return BSTEncoder(settings, width, target, self.l2, seed=self._seed + 1000 * self._built_mlps, name=name)

    def _feature_width(self, name: str, widths: Dict[str, int]) -> int:
        return self._raw_widths.get(name) or widths[name]

    def group_features(self, group: str, embeddings: Embeddings, dense: Optional[tf.Tensor]) -> List[tf.Tensor]:
        """Feature group ``group`` as a list (EasyRec's ``only_output_feature_list``), in the group's order: an id
        feature's embedding [B, dim], a raw feature's columns [B, dim]."""
        raw = self._raw_widths
        return [tf.reshape(tf.gather(dense, self.specs.dense_columns([n]), axis=1), [-1, raw[n]]) if n in raw
                else embeddings.by_name[n] for n in self._group_config[group].feature_names]

    def backbone_outputs(self, embeddings: Embeddings, dense: Optional[tf.Tensor], training: Any) -> List[tf.Tensor]:
        """The outputs of the blocks the model reads (concat_blocks / output_blocks), in order; a block giving
        a list (MMoE's) gives its tensors in order. A block runs when a later one reads it (once; a package's
        blocks once per call of their package); in training the AuxiliaryLoss blocks run too (their losses
        join the model's)."""
        values: Dict[str, Any] = {}
        nodes = {node.name: node for node in self.graph.blocks}
        packages = {package.name: package for package in self.graph.packages}

        def main_value(name: str) -> Any:
            if name not in values:
                values[name] = self._run(nodes[name], lambda source: source_value(source, None),
                                         embeddings, dense, training)
            return values[name]

        def call_package(name: str, given: Any) -> Any:
            package, local = packages[name], {}
            members = {node.name: node for node in package.blocks}

            def member_value(block: str) -> Any:
                if block not in local:
                    local[block] = self._run(members[block], lambda source: source_value(
                        source, (members, given, member_value)), embeddings, dense, training)
                return local[block]
            outputs = [member_value(block) for block in package.outputs]
            if package.as_list:
                return [t for out in outputs for t in (out if isinstance(out, list) else [out])]
            return outputs[0] if len(outputs) == 1 else tf.concat(outputs, axis=-1)

        def source_value(source: Source, scope: _Scope) -> Any:
            if source.kind == "group":
                return self.group_input(source.name, embeddings, dense, training)
            if source.kind == "package_input":
                return scope[1]  # type: ignore[index]  # (a package's block: its scope is given)
            if source.kind == "package":
                given = source.package_input
                inner = call_package(given, None) if given in packages else \
                    (block_value(given, scope) if given else None)
                return call_package(source.name, inner)
            return block_value(source.name, scope)

        def block_value(name: str, scope: _Scope) -> Any:
            return scope[2](name) if scope is not None and name in scope[0] else main_value(name)

        parts: List[tf.Tensor] = []
        for name in self.graph.outputs:
            out = main_value(name)
            parts += out if isinstance(out, list) else [out]
        if training:
            for name in self.graph.losses:
                main_value(name)
        return parts

    def backbone_output(self, embeddings: Embeddings, dense: Optional[tf.Tensor], training: Any) -> tf.Tensor:
        """The outputs concatenated, then ``top_mlp`` when set: EasyRec's backbone output."""
        parts = self.backbone_outputs(embeddings, dense, training)
        hidden = parts[0] if len(parts) == 1 else tf.concat(parts, axis=-1)
        return self.top_mlp(hidden, training=training) if self.top_mlp is not None else hidden

    def logit(self, embeddings: Embeddings, first_order: Optional[tf.Tensor], dense: Optional[tf.Tensor],
              training: Any) -> tf.Tensor:
        hidden = self.backbone_output(embeddings, dense, training)
        if hidden.shape[-1] == 1:  # (EasyRec adds the output layer only when the width is not one logit's)
            return hidden[:, 0]
        return one_or_all(self.output_logit(hidden))

    def _run(self, node: BlockInputs, read: Callable[[Source], Any], embeddings: Embeddings,
             dense: Optional[tf.Tensor], training: Any) -> Any:
        """Block ``node``'s output; ``read(source)`` gives the value of one of its inputs."""
        layers = self.block_layers[node.name]
        if node.reads_sequence:
            return self.sequence_input(node.inputs[0].name, embeddings)
        if node.layer == "input_layer" and node.block.input_layer.only_output_feature_list:
            return self.group_features(node.inputs[0].name, embeddings, dense)
        parts = []
        for source in node.inputs:
            value = read(source)
            parts.append([value, value] if source.twice else value)
        if node.layer == "recurrent":
            return self._recurrent(node, parts[0], layers, training)
        if node.block.merge_inputs_into_list:
            x: Any = parts
        else:
            x = parts[0] if len(parts) == 1 else tf.concat(parts, axis=-1)
        for layer in layers:
            if isinstance(layer, BSTEncoder):
                x = layer(x.sequence, x.lengths, x.keys, training=training)
            elif isinstance(layer, TargetAttention):
                x = layer(x.keys, x.sequence, x.lengths, training=training)
            else:
                x = layer(x, training=training)
        return x

    @staticmethod
    def _recurrent(node: BlockInputs, inputs: List[tf.Tensor], layers: list, training: Any) -> Any:
        """EasyRec's recurrent layer with ``fixed_input_index``: each step's output replaces every input but the
        fixed one (DCN-v2's x0); the inputs but the fixed one are the output."""
        fixed = node.block.recurrent.fixed_input_index
        values = list(inputs)
        for layer in layers:
            out = layer(values, training=training)
            values = [v if i == fixed else out for i, v in enumerate(values)]
        rest = [v for i, v in enumerate(values) if i != fixed]
        return rest[0] if len(rest) == 1 else rest


# The builder of each keras_layer class_name a block may run (graph.py ``BLOCKS`` holds their settings field and
# their input and output kinds; a Cross runs only in a recurrent block, built by ``_layers_of``). Each builds
# its layer from the KerasLayer settings, the block and the feature widths, drawing seeds in build order.
BLOCK_BUILDERS: Dict[str, Callable[..., Any]] = {
    "MLP": RankModel._mlp_block,
    "MMoE": RankModel._mmoe_block,
    "MaskNet": RankModel._masknet_block,
    "SENet": RankModel._senet_block,
    "AuxiliaryLoss": RankModel._auxiliary_loss_block,
    "SeqAugment": RankModel._seq_augment_block,
    "SeqAugmentOps": RankModel._seq_augment_block,
    "DIN": RankModel._din_block,
    "BST": RankModel._bst_block,
}
