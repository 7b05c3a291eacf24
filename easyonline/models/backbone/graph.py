"""The block graph of a backbone (EasyRec's ``model_config.backbone``): which block reads which, in what order,
and the checks that name the field of anything this package does not run. No TensorFlow: the config
validator calls ``check_backbone`` before any model is built.

A block reads feature groups (through an input layer) or earlier blocks; its inputs are concatenated on the
last axis and its layer runs over them. Each block's output is of one kind: a ``tensor`` [B, width]; a
``list`` of them (an input layer's ``only_output_feature_list``, which SENet reads; MMoE's one input per
task); or a ``sequence`` input (an input layer's ``output_seq_and_normal_feature``: the group's sequences,
their lengths and its target features), which only a DIN or BST layer reads. The outputs of
``concat_blocks`` (default: every block no other block reads) are what the model reads.
"""
import dataclasses
from typing import Collection, Dict, List, Mapping, Tuple

from easyonline.core.errors import ConfigError
from easyonline.protos import pipeline_pb2

LAYER_CLASSES = ("MLP", "DIN", "BST", "SENet", "MMoE", "MaskNet")  # EasyRec's class_names a KerasLayer may name here
SEQUENCE_LAYERS = ("DIN", "BST")  # the ones that read a sequence input
_PARAMS = {"MLP": "mlp", "DIN": "din", "BST": "bst", "SENet": "senet", "MMoE": "mmoe", "MaskNet": "masknet"}
# the kind of input each layer reads, and of its output
_READS = {"MLP": "tensor", "DIN": "sequence", "BST": "sequence", "SENet": "list", "MMoE": "tensor", "MaskNet": "tensor"}
_GIVES = {"MLP": "tensor", "DIN": "tensor", "BST": "tensor", "SENet": "tensor", "MMoE": "list", "MaskNet": "tensor"}
BST_ACTIVATIONS = ("gelu", "relu", "tanh", "swish")
TARGET_POSITIONS = ("head", "tail", "ignore")
_UNSUPPORTED_INPUT_LAYER = ("feature_dropout_rate", "only_output_3d_tensor", "output_2d_tensor_and_feature_list",
                            "wide_output_dim")


@dataclasses.dataclass(frozen=True)
class BlockInputs:
    """A block's inputs, in config order: ("group", name) read through a plain input layer, or ("block", name)."""
    block: pipeline_pb2.Block
    inputs: Tuple[Tuple[str, str], ...]

    @property
    def name(self) -> str:
        return self.block.name

    @property
    def layer(self) -> str:
        """input_layer, keras_layer, layers (sequential) or identity."""
        if self.block.layers:
            return "layers"
        return self.block.WhichOneof("layer") or "identity"

    @property
    def reads_sequence(self) -> bool:
        """An input layer that gives a sequence input (DIN's and BST's)."""
        return self.layer == "input_layer" and self.block.input_layer.output_seq_and_normal_feature


@dataclasses.dataclass(frozen=True)
class BlockGraph:
    """The blocks in an order where each comes after every block it reads, the outputs the model reads, and
    each block's output kind (tensor, list, sequence)."""
    order: Tuple[BlockInputs, ...]
    outputs: Tuple[str, ...]
    kinds: Tuple[Tuple[str, str], ...]

    def kind(self, name: str) -> str:
        return dict(self.kinds)[name]


def _require(condition: bool, path: str, message: str) -> None:
    if not condition:
        raise ConfigError(path, message)


def block_graph(backbone: pipeline_pb2.Backbone, groups: Mapping[str, pipeline_pb2.FeatureGroup],
                sequence_names: Collection[str], dims: Mapping[str, int],
                path: str = "model_config.backbone") -> BlockGraph:
    """The graph of ``backbone``; ConfigError naming the field of a block or setting that cannot run here.

    ``groups``: the feature groups by name; ``sequence_names``: every SequenceFeature's name; ``dims``: every
    feature's embedding width (for the DIN and BST layers' widths)."""
    _require(len(backbone.blocks) > 0, f"{path}.blocks", "a backbone needs at least one block")
    index: Dict[str, int] = {}
    for i, block in enumerate(backbone.blocks):
        _require(bool(block.name), f"{path}.blocks[{i}].name", "every block needs a name")
        _require(block.name not in index, f"{path}.blocks[{i}].name", f"duplicate block name {block.name!r}")
        index[block.name] = i
    nodes = [_block_inputs(block, index, groups, sequence_names, f"{path}.blocks[{i}]")
             for i, block in enumerate(backbone.blocks)]
    by_name = {node.name: node for node in nodes}
    order = _ordered(nodes, path)
    kinds: Dict[str, str] = {}
    for node in order:
        where = f"{path}.blocks[{index[node.name]}]"
        kinds[node.name] = _output_kind(node, kinds, by_name, groups, sequence_names, dims, where)
    read = {name for node in nodes for kind, name in node.inputs if kind == "block"}
    _require(not backbone.output_blocks or not backbone.concat_blocks, f"{path}.output_blocks",
             "give concat_blocks or output_blocks, not both")
    outputs = tuple(backbone.concat_blocks or backbone.output_blocks) or tuple(
        node.name for node in order if node.name not in read)
    field = "output_blocks" if backbone.output_blocks else "concat_blocks"
    for j, name in enumerate(outputs):
        where = f"{path}.{field}[{j}]" if backbone.concat_blocks or backbone.output_blocks else f"{path}.blocks"
        _require(name in by_name, where, f"{name!r} is not a block (blocks: {sorted(by_name)})")
        _require(kinds[name] != "sequence", where,
                 f"block {name!r} is a sequence input (output_seq_and_normal_feature): a DIN or BST block reads it, "
                 "it is not an output")
    if backbone.HasField("top_mlp"):
        check_mlp(backbone.top_mlp, f"{path}.top_mlp")
    return BlockGraph(tuple(order), outputs, tuple(kinds.items()))


def _block_inputs(block: pipeline_pb2.Block, index: Mapping[str, int],
                  groups: Mapping[str, pipeline_pb2.FeatureGroup], sequence_names: Collection[str],
                  path: str) -> BlockInputs:
    _require(len(block.inputs) > 0, f"{path}.inputs", f"block {block.name!r} needs at least one input")
    for field, why in (("extra_input_fn", "a Python expression"), ("merge_inputs_into_list", "a list input")):
        _require(not block.HasField(field) or not getattr(block, field), f"{path}.{field}",
                 f"{why} is not supported here (EasyRec's {field})")
    _require(block.input_concat_axis == -1, f"{path}.input_concat_axis",
             "inputs are concatenated on the last axis only (-1)")
    inputs = []
    for j, item in enumerate(block.inputs):
        where = f"{path}.inputs[{j}]"
        kind = item.WhichOneof("name")
        _require(kind in ("feature_group_name", "block_name"), where + (f".{kind}" if kind else ""),
                 "an input is a feature_group_name or a block_name (EasyRec's block packages are not supported)")
        for field in ("input_fn", "input_slice"):
            _require(not item.HasField(field), f"{where}.{field}",
                     f"Python expressions on an input ({field}) are not run here: give the block its input as is")
        if item.ignore_input:
            continue
        name = getattr(item, kind)
        if kind == "block_name":
            _require(name in index, f"{where}.block_name", f"{name!r} is not a block (blocks: {sorted(index)})")
            _require(name != block.name, f"{where}.block_name", f"block {name!r} reads itself")
            inputs.append(("block", name))
        else:
            _require(name in groups, f"{where}.feature_group_name",
                     f"{name!r} is not a model_config.feature_groups group_name (groups: {sorted(groups)})")
            _require(groups[name].wide_deep != pipeline_pb2.FeatureGroup.WIDE, f"{where}.feature_group_name",
                     f"feature group {name!r} is WIDE (first-order weights only): a block reads DEEP or WIDE_AND_DEEP")
            sequences = [n for n in groups[name].feature_names if n in sequence_names]
            reads_sequence = block.WhichOneof("layer") == "input_layer" and \
                block.input_layer.output_seq_and_normal_feature
            _require(not sequences or reads_sequence, f"{where}.feature_group_name",
                     f"feature group {name!r} holds SequenceFeature(s) {sequences}: read it with an input layer "
                     "with output_seq_and_normal_feature, for a DIN or BST block")
            inputs.append(("group", name))
    _require(bool(inputs), f"{path}.inputs", f"every input of block {block.name!r} is ignore_input")
    return BlockInputs(block, tuple(inputs))


def _output_kind(node: BlockInputs, kinds: Mapping[str, str], blocks: Mapping[str, BlockInputs],
                 groups: Mapping[str, pipeline_pb2.FeatureGroup], sequence_names: Collection[str],
                 dims: Mapping[str, int], path: str) -> str:
    """The kind of ``node``'s output (``kinds``: those of the blocks before it); ConfigError when its layer
    cannot read what it is given."""
    block = node.block
    if node.layer == "input_layer":
        layer = block.input_layer
        _require(len(node.inputs) == 1 and node.inputs[0][0] == "group", f"{path}.inputs",
                 "an input layer reads exactly one feature_group_name")
        for field in _UNSUPPORTED_INPUT_LAYER:
            _require(not layer.HasField(field) or not getattr(layer, field), f"{path}.input_layer.{field}",
                     "is not supported here: an input layer gives its group's features concatenated, as a list "
                     "(only_output_feature_list) or, with output_seq_and_normal_feature, its sequences and target apart")
        _require(not (layer.do_batch_norm and layer.do_layer_norm), f"{path}.input_layer",
                 "do_batch_norm and do_layer_norm cannot both be set")
        _require(0 <= layer.dropout_rate < 1, f"{path}.input_layer.dropout_rate", "must be in [0, 1)")
        _require(not (layer.output_seq_and_normal_feature and layer.only_output_feature_list), f"{path}.input_layer",
                 "output_seq_and_normal_feature and only_output_feature_list cannot both be set")
        if layer.output_seq_and_normal_feature or layer.only_output_feature_list:
            _require(layer.concat_seq_feature, f"{path}.input_layer.concat_seq_feature",
                     "the sequences are concatenated here (false: a list of them, not supported)")
            _require(not (layer.do_batch_norm or layer.do_layer_norm or layer.dropout_rate), f"{path}.input_layer",
                     "a sequence input or a feature list takes no normalization or dropout here")
            return "sequence" if layer.output_seq_and_normal_feature else "list"
        return "tensor"
    if node.layer == "lambda" or any(item.WhichOneof("layer") == "lambda" for item in block.layers):
        raise ConfigError(f"{path}.lambda", "Python lambda layers are not run here (EasyRec evaluates the "
                          "expression); use an MLP, DIN, BST, SENet, MMoE or MaskNet layer, or a block with several "
                          "inputs to concatenate")
    read = [kinds[name] if kind == "block" else "tensor" for kind, name in node.inputs]
    others = [(name, r) for (_, name), r in zip(node.inputs, read) if r != "tensor"]
    if len(read) > 1 and others:
        raise ConfigError(f"{path}.inputs", f"block {others[0][0]!r} gives a {others[0][1]}: only tensors are "
                          "concatenated (give it a block of its own)")
    kind = read[0] if len(read) == 1 else "tensor"
    layers = [(f"{path}.keras_layer", block.keras_layer)] if node.layer == "keras_layer" else \
        [(f"{path}.layers[{k}].keras_layer", item.keras_layer) for k, item in enumerate(block.layers)]
    for k, (where, keras) in enumerate(layers):
        _check_keras_layer(keras, where)
        wanted = _READS[keras.class_name]
        if kind != wanted:
            what = {"sequence": "a sequence input (an input layer with output_seq_and_normal_feature)",
                    "list": "a feature list (an input layer with only_output_feature_list)",
                    "tensor": "a tensor (a feature group, or a block giving one)"}
            raise ConfigError(where if k else f"{path}.inputs", f"layer {keras.class_name} reads {what[wanted]}; "
                              f"its input here is {what[kind].split(' (')[0]}")
        if wanted == "sequence":
            _require(len(node.inputs) == 1, f"{path}.inputs", f"layer {keras.class_name} reads one block")
            group = groups[blocks[node.inputs[0][1]].inputs[0][1]]
            _check_sequence_widths(keras, group, sequence_names, dims, where)
        if keras.class_name == "SENet":
            _check_senet(keras.senet, blocks, node, groups, dims, where)
        kind = _GIVES[keras.class_name]
    if kind == "sequence" and node.layer == "identity":
        raise ConfigError(f"{path}.inputs", "a sequence input is read by a DIN or BST layer only")
    return kind


def _check_senet(senet: pipeline_pb2.SENet, blocks: Mapping[str, BlockInputs], node: BlockInputs,
                 groups: Mapping[str, pipeline_pb2.FeatureGroup], dims: Mapping[str, int], path: str) -> None:
    _require(senet.reduction_ratio > 0, f"{path}.senet.reduction_ratio", "must be at least 1")
    _require(senet.num_squeeze_group > 0, f"{path}.senet.num_squeeze_group", "must be at least 1")
    source = blocks[node.inputs[0][1]]
    if source.layer != "input_layer":
        return
    group = groups[source.inputs[0][1]]
    bad = [n for n in group.feature_names if (dims.get(n) or 1) % senet.num_squeeze_group]
    _require(not bad, f"{path}.senet.num_squeeze_group", f"features {bad} of group {group.group_name!r}: "
             f"each feature's width must be a multiple of num_squeeze_group ({senet.num_squeeze_group})")


def _check_keras_layer(keras: pipeline_pb2.KerasLayer, path: str) -> None:
    _require(keras.class_name in LAYER_CLASSES, f"{path}.class_name",
             f"{keras.class_name!r} is not one of the layers run here ({', '.join(LAYER_CLASSES)})")
    field = _PARAMS[keras.class_name]
    _require(keras.WhichOneof("params") == field, f"{path}.{field}",
             f"a {keras.class_name} layer takes its settings in {field} {{ ... }}")
    if field == "mlp":
        check_mlp(keras.mlp, f"{path}.mlp")
    elif field == "din":
        check_mlp(keras.din.attention_dnn, f"{path}.din.attention_dnn")
        units = list(keras.din.attention_dnn.hidden_units)
        _require(units[-1] == 1, f"{path}.din.attention_dnn.hidden_units",
                 f"the last layer gives the score: one unit, got {units}")
        _require(keras.din.attention_normalizer in ("softmax", "sigmoid"), f"{path}.din.attention_normalizer",
                 f"{keras.din.attention_normalizer!r} is not softmax or sigmoid")
    elif field == "mmoe":
        _require(keras.mmoe.num_task > 0, f"{path}.mmoe.num_task", "must be at least 1")
        _require(keras.mmoe.num_expert > 0, f"{path}.mmoe.num_expert", "must be at least 1")
        _require(keras.mmoe.HasField("expert_mlp"), f"{path}.mmoe.expert_mlp",
                 "is required here (EasyRec's MMoE without experts reads a list of them: not supported)")
        check_mlp(keras.mmoe.expert_mlp, f"{path}.mmoe.expert_mlp")
    elif field == "masknet":
        _require(len(keras.masknet.mask_blocks) > 0, f"{path}.masknet.mask_blocks", "at least one mask block")
        for i, block in enumerate(keras.masknet.mask_blocks):
            where = f"{path}.masknet.mask_blocks[{i}]"
            _require(block.HasField("reduction_factor") or block.aggregation_size > 0, where,
                     "give reduction_factor or aggregation_size (the aggregation layer's size)")
            _require(not block.HasField("reduction_factor") or block.reduction_factor > 0,
                     f"{where}.reduction_factor", "must be > 0")
        if keras.masknet.HasField("mlp"):
            check_mlp(keras.masknet.mlp, f"{path}.masknet.mlp")
    elif field == "bst":
        bst = keras.bst
        for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "max_position_embeddings"):
            _require(getattr(bst, name) > 0, f"{path}.bst.{name}", "is required and must be at least 1")
        _require(bst.hidden_size % bst.num_attention_heads == 0, f"{path}.bst.num_attention_heads",
                 f"{bst.num_attention_heads} heads do not divide hidden_size {bst.hidden_size}")
        _require(bst.hidden_act in BST_ACTIVATIONS, f"{path}.bst.hidden_act",
                 f"{bst.hidden_act!r} is not one of {', '.join(BST_ACTIVATIONS)}")
        _require(bst.target_item_position in TARGET_POSITIONS, f"{path}.bst.target_item_position",
                 f"{bst.target_item_position!r} is not one of {', '.join(TARGET_POSITIONS)}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            _require(0 <= getattr(bst, name) < 1, f"{path}.bst.{name}", "must be in [0, 1)")


def _check_sequence_widths(keras: pipeline_pb2.KerasLayer, group: pipeline_pb2.FeatureGroup,
                           sequence_names: Collection[str], dims: Mapping[str, int], path: str) -> None:
    target = sum(dims[n] for n in group.feature_names if n not in sequence_names)
    width = sum(dims[n] for n in group.feature_names if n in sequence_names)
    if keras.class_name == "DIN":
        _require(0 < target <= width, path, f"feature group {group.group_name!r}: DIN compares its target "
                 f"features ({target} wide) with its sequences ({width} wide): the target must be there and no "
                 "wider (a narrower one is zero-padded)")
    elif keras.bst.target_item_position != "ignore" and target:
        _require(target == width, path, f"feature group {group.group_name!r}: BST puts its target features ({target} "
                 f"wide) among its sequences ({width} wide) as one more position: they must be as wide")


def check_mlp(mlp: pipeline_pb2.MLP, path: str) -> None:
    """An MLP layer's settings that can run: at least one layer, ratios in [0, 1), no extra outputs."""
    _require(len(mlp.hidden_units) > 0, f"{path}.hidden_units", "at least one layer is required")
    _require(all(u > 0 for u in mlp.hidden_units), f"{path}.hidden_units", "every layer needs at least one unit")
    _require(all(0 <= r < 1 for r in mlp.dropout_ratio), f"{path}.dropout_ratio", "every ratio must be in [0, 1)")
    _require(not mlp.add_to_outputs, f"{path}.add_to_outputs",
             "an MLP's extra prediction output is not supported (the model's outputs are its tasks')")


def _ordered(nodes: List[BlockInputs], path: str) -> List[BlockInputs]:
    """``nodes`` in config order as far as their inputs allow (a stable topological order)."""
    done: Dict[str, BlockInputs] = {}
    pending = list(nodes)
    while pending:
        ready = [n for n in pending if all(kind != "block" or name in done for kind, name in n.inputs)]
        if not ready:
            raise ConfigError(f"{path}.blocks", "the blocks read each other in a cycle: "
                              + ", ".join(sorted(n.name for n in pending)))
        done[ready[0].name] = ready[0]
        pending.remove(ready[0])
    return list(done.values())
