"""The block graph of a backbone (EasyRec's ``model_config.backbone``): which block reads which, in what order,
and the checks that name the field of anything this package does not run. No TensorFlow: the config
validator calls ``check_backbone`` before any model is built.

A block reads feature groups (through an input layer) or earlier blocks; its inputs are concatenated on the
last axis and its layer runs over them. Each block's output is of one kind: a ``tensor`` [B, width]; a
``list`` of them (an input layer's ``only_output_feature_list``, which SENet reads; MMoE's one input per
task); or a ``sequence`` input (an input layer's ``output_seq_and_normal_feature``: the group's sequences,
their lengths and its target features), which only a DIN or BST layer reads. The outputs of
``concat_blocks`` (default: every block no other block reads) are what the model reads.

A package (``packages``) is a named group of blocks a block calls (``package_name``, with ``package_input``:
a block, or another package called with none); its blocks read that input with ``use_package_input``, and
every call shares its weights (CL4SRec's one encoder of a sequence and of its augmented views). An
AuxiliaryLoss block adds a loss in training and is read by nothing.
"""
import dataclasses
from typing import Collection, Dict, List, Mapping, NamedTuple, Optional, Tuple

from easyonline.core.errors import ConfigError, require
from easyonline.protos import pipeline_pb2

class BlockKind(NamedTuple):
    """A layer a backbone block may run (a KerasLayer's ``class_name``): the KerasLayer field holding its
    settings ("": none), the kind of input it reads and the kind of output it gives (tensor, list, sequence;
    "loss": an AuxiliaryLoss's, which nothing reads). Its builder: backbone_rank_model.py ``BLOCK_BUILDERS``."""
    params: str
    reads: str
    gives: str


# The registry of EasyRec's class_names run here (SeqAugmentOps: EasyRec's compiled op of SeqAugment's
# augmentations, run here as SeqAugment's TensorFlow ops). A new block: an entry here and a builder there.
BLOCKS: Dict[str, BlockKind] = {
    "MLP": BlockKind("mlp", "tensor", "tensor"),
    "DIN": BlockKind("din", "sequence", "tensor"),
    "BST": BlockKind("bst", "sequence", "tensor"),
    "SENet": BlockKind("senet", "list", "tensor"),
    "MMoE": BlockKind("mmoe", "tensor", "list"),
    "MaskNet": BlockKind("masknet", "tensor", "tensor"),
    "SeqAugment": BlockKind("seq_aug", "sequence", "sequence"),
    "SeqAugmentOps": BlockKind("seq_aug", "sequence", "sequence"),
    "AuxiliaryLoss": BlockKind("st_params", "list", "loss"),
    "Cross": BlockKind("", "list", "tensor"),
}
LAYER_CLASSES = tuple(BLOCKS)
SEQUENCE_LAYERS = tuple(name for name, kind in BLOCKS.items() if kind.reads == "sequence")
# the one Python input_fn taken (its meaning, not run): the input twice, a recurrent Cross's x0 and x
TWICE = "lambda x: [x, x]"
BST_ACTIVATIONS = ("gelu", "relu", "tanh", "swish")
TARGET_POSITIONS = ("head", "tail", "ignore")
LOSS_TYPES = ("nce_loss", "info_nce", "l2_loss")
_UNSUPPORTED_INPUT_LAYER = ("feature_dropout_rate", "only_output_3d_tensor", "output_2d_tensor_and_feature_list",
                            "wide_output_dim")


class Source(NamedTuple):
    """One input of a block: a feature ``group``, a ``block``'s output, a ``package`` called with
    ``package_input`` (a block, or a package called with none; "": none), or the ``package_input`` a package
    was called with."""
    kind: str
    name: str = ""
    package_input: str = ""
    twice: bool = False  # (input_fn "lambda x: [x, x]": the value twice, as a list)


class Kind(NamedTuple):
    """What a block gives: tensor, list, sequence or loss; ``group``: the feature group a sequence input or a
    feature list comes from ("" for others)."""
    kind: str
    group: str = ""


@dataclasses.dataclass(frozen=True)
class BlockInputs:
    """A block and its inputs, in config order; ``package``: the package holding it ("" the backbone's own)."""
    block: pipeline_pb2.Block
    inputs: Tuple[Source, ...]
    package: str = ""

    @property
    def name(self) -> str:
        return self.block.name

    @property
    def layer(self) -> str:
        """input_layer, keras_layer, recurrent, layers (sequential) or identity."""
        if self.block.layers:
            return "layers"
        return self.block.WhichOneof("layer") or "identity"

    @property
    def reads_sequence(self) -> bool:
        """An input layer that gives a sequence input (DIN's and BST's)."""
        return self.layer == "input_layer" and self.block.input_layer.output_seq_and_normal_feature

    @property
    def keras_layers(self) -> List[pipeline_pb2.KerasLayer]:
        if self.layer == "keras_layer":
            return [self.block.keras_layer]
        if self.layer == "recurrent":
            return [self.block.recurrent.keras_layer]
        return [item.keras_layer for item in self.block.layers] if self.layer == "layers" else []


@dataclasses.dataclass(frozen=True)
class PackageGraph:
    """A package's blocks (config order) and its outputs; ``as_list``: output_blocks given (a list out)."""
    name: str
    blocks: Tuple[BlockInputs, ...]
    outputs: Tuple[str, ...]
    as_list: bool


@dataclasses.dataclass(frozen=True)
class BlockGraph:
    """The backbone's own blocks (config order), its packages, the outputs the model reads, each of its blocks'
    output kind, the blocks that add a loss in training, and the feature group each block's layer reads (a
    sequence input's or a feature list's) where it reads one."""
    blocks: Tuple[BlockInputs, ...]
    packages: Tuple[PackageGraph, ...]
    outputs: Tuple[str, ...]
    kinds: Tuple[Tuple[str, str], ...]
    losses: Tuple[str, ...]
    groups_read: Tuple[Tuple[str, str], ...]

    @property
    def order(self) -> Tuple[BlockInputs, ...]:
        """Every block, the packages' too (each name is one block)."""
        return self.blocks + tuple(node for package in self.packages for node in package.blocks)

    def kind(self, name: str) -> str:
        return dict(self.kinds)[name]

    def group_read(self, name: str) -> str:
        return dict(self.groups_read)[name]


def block_graph(backbone: pipeline_pb2.Backbone, groups: Mapping[str, pipeline_pb2.FeatureGroup],
                sequence_names: Collection[str], dims: Mapping[str, int],
                path: str = "model_config.backbone") -> BlockGraph:
    """The graph of ``backbone``; ConfigError naming the field of a block or setting that cannot run here.

    ``groups``: the feature groups by name; ``sequence_names``: every SequenceFeature's name; ``dims``: every
    feature's embedding width (for the DIN, BST and SENet layers' widths)."""
    require(len(backbone.blocks) > 0, f"{path}.blocks", "a backbone needs at least one block")
    where: Dict[str, str] = {}
    packages: Dict[str, pipeline_pb2.BlockPackage] = {}
    for p, package in enumerate(backbone.packages):
        ppath = f"{path}.packages[{p}]"
        require(bool(package.name) and package.name not in packages, f"{ppath}.name",
                f"every package needs a name of its own (got {package.name!r})")
        require(len(package.blocks) > 0, f"{ppath}.blocks", f"package {package.name!r} has no block")
        packages[package.name] = package
        for i, block in enumerate(package.blocks):
            where.setdefault(block.name, f"{ppath}.blocks[{i}]")
    for i, block in enumerate(backbone.blocks):
        where.setdefault(block.name, f"{path}.blocks[{i}]")
    seen = set()
    for scope, blocks in [("", backbone.blocks)] + [(p.name, p.blocks) for p in backbone.packages]:
        for i, block in enumerate(blocks):
            spath = f"{path}.blocks[{i}]" if not scope else f"{path}.packages[{list(packages).index(scope)}].blocks[{i}]"
            require(bool(block.name), f"{spath}.name", "every block needs a name")
            require(block.name not in seen, f"{spath}.name",
                    f"duplicate block name {block.name!r} (names are one space, packages' blocks included)")
            require(block.name not in packages, f"{spath}.name", f"{block.name!r} is a package's name too")
            seen.add(block.name)
    checker = _Checker(backbone, packages, groups, sequence_names, dims, where, path)
    main = checker.main
    read = {source.name for node in checker.all_nodes() for source in node.inputs if source.kind == "block"} | \
        {source.package_input for node in checker.all_nodes() for source in node.inputs if source.kind == "package"}
    for node in main.values():  # every block of the backbone is checked, read or not
        checker.kind_of(node.name, None)
    called = {s.name for n in checker.all_nodes() for s in n.inputs if s.kind == "package"} | \
        {s.package_input for n in checker.all_nodes() for s in n.inputs if s.kind == "package"}
    for p, package in enumerate(backbone.packages):
        require(package.name in called, f"{path}.packages[{p}]", f"package {package.name!r} is called by no block "
                "(inputs { package_name: ... })")
    losses = tuple(name for name in main if checker.kind_of(name, None).kind == "loss")
    require(not backbone.output_blocks or not backbone.concat_blocks, f"{path}.output_blocks",
            "give concat_blocks or output_blocks, not both")
    named = tuple(backbone.concat_blocks or backbone.output_blocks)
    outputs = named or tuple(name for name in main if name not in read and name not in losses)
    field = "output_blocks" if backbone.output_blocks else "concat_blocks"
    for j, name in enumerate(outputs):
        opath = f"{path}.{field}[{j}]" if named else f"{path}.blocks"
        require(name in main, opath, f"{name!r} is not a block of the backbone (blocks: {sorted(main)})")
        kind = checker.kind_of(name, None).kind
        require(kind in ("tensor", "list"), opath, f"block {name!r} gives a {kind}: an output is a tensor or a list "
                "(a sequence input is read by a DIN, BST or SeqAugment block; a loss by nothing)")
    if backbone.HasField("top_mlp"):
        check_mlp(backbone.top_mlp, f"{path}.top_mlp")
    return BlockGraph(tuple(main.values()), tuple(checker.package_graph(p) for p in packages), outputs,
                      tuple((n, checker.kind_of(n, None).kind) for n in main), losses,
                      tuple(sorted(checker.groups_read.items())))


class _Checker:
    """Works out every block's output kind as the model evaluates them (a block when a later one asks for it;
    a package each time a block calls it), so that a cycle, a missing input or a layer given the wrong kind is
    a ConfigError naming the field."""

    def __init__(self, backbone: pipeline_pb2.Backbone, packages: Mapping[str, pipeline_pb2.BlockPackage],
                 groups: Mapping[str, pipeline_pb2.FeatureGroup], sequence_names: Collection[str],
                 dims: Mapping[str, int], where: Mapping[str, str], path: str) -> None:
        self.groups, self.sequence_names, self.dims, self.where, self.path = groups, sequence_names, dims, where, path
        own = {b.name for b in backbone.blocks}  # a block reads the backbone's blocks, and its own package's
        self.main = {b.name: _block_inputs(b, own, packages, groups, sequence_names, where[b.name], "")
                     for b in backbone.blocks}
        self.packages = {p: {b.name: _block_inputs(b, own | {m.name for m in package.blocks}, packages, groups,
                                                   sequence_names, where[b.name], p)
                             for b in package.blocks} for p, package in packages.items()}
        self.package_config = packages
        self.memo: Dict[Tuple[str, Optional[Kind]], Kind] = {}
        self.visiting: List[Tuple[str, Optional[Kind]]] = []
        self.groups_read: Dict[str, str] = {}

    def all_nodes(self) -> List[BlockInputs]:
        return list(self.main.values()) + [n for blocks in self.packages.values() for n in blocks.values()]

    def node(self, name: str) -> BlockInputs:
        return self.main[name] if name in self.main else next(b[name] for b in self.packages.values() if name in b)

    def kind_of(self, name: str, given: Optional[Kind]) -> Kind:
        """The kind block ``name`` gives; ``given``: the input its package was called with (None: none)."""
        node = self.node(name)
        key = (name, given if node.package else None)
        if key in self.memo:
            return self.memo[key]
        if key in self.visiting:
            cycle = [n for n, _ in self.visiting[self.visiting.index(key):]]
            raise ConfigError(f"{self.path}.blocks", "the blocks read each other in a cycle: " + ", ".join(cycle))
        self.visiting.append(key)
        kind = self._output_kind(node, key[1])
        self.visiting.pop()
        self.memo[key] = kind
        return kind

    def package_kind(self, name: str, given: Optional[Kind], path: str) -> Kind:
        package = self.package_graph(name)
        kinds = [self.kind_of(block, given) for block in package.outputs]
        for block, kind in zip(package.outputs, kinds):
            require(kind.kind in ("tensor", "list") or (len(kinds) == 1 and not package.as_list), path,
                    f"package {name!r}'s output block {block!r} gives a {kind.kind}: a package's outputs are "
                    "tensors, or one block's output of any kind")
        if package.as_list:
            return Kind("list")
        return kinds[0] if len(kinds) == 1 else Kind("tensor")

    def package_graph(self, name: str) -> PackageGraph:
        config = self.package_config[name]
        blocks = self.packages[name]
        read = {s.name for n in blocks.values() for s in n.inputs if s.kind == "block"}
        outputs = tuple(config.concat_blocks or config.output_blocks) or tuple(n for n in blocks if n not in read)
        for j, block in enumerate(outputs):
            require(block in blocks, f"{self.where[next(iter(blocks))].rsplit('.blocks', 1)[0]}.concat_blocks[{j}]",
                    f"{block!r} is not a block of package {name!r}")
        return PackageGraph(name, tuple(blocks.values()), outputs, bool(config.output_blocks))

    def _source_kind(self, source: Source, node: BlockInputs, given: Optional[Kind], path: str) -> Kind:
        if source.kind == "group":
            return Kind("tensor")
        if source.kind == "package_input":
            require(bool(node.package), path, "use_package_input is for a block of a package")
            require(given is not None, path, f"package {node.package!r} is called without an input "
                    "(package_input), and its block reads it")
            return given  # type: ignore[return-value]
        if source.kind == "package":
            inner: Optional[Kind] = None
            if source.package_input in self.package_config:
                inner = self.package_kind(source.package_input, None, path)
            elif source.package_input:
                inner = self.kind_of(source.package_input, given)
            return self.package_kind(source.name, inner, path)
        return self.kind_of(source.name, given)

    def _output_kind(self, node: BlockInputs, given: Optional[Kind]) -> Kind:
        path = self.where[node.name]
        block = node.block
        if node.layer == "input_layer":
            return _input_layer_kind(node, path)
        if node.layer == "lambda" or any(item.WhichOneof("layer") == "lambda" for item in block.layers):
            raise ConfigError(f"{path}.lambda", "Python lambda layers are not run here (EasyRec evaluates the "
                              "expression); use a layer of " + ", ".join(LAYER_CLASSES) + ", or a block with "
                              "several inputs to concatenate")
        read = [self._source_kind(s, node, given, f"{path}.inputs[{i}]") for i, s in enumerate(node.inputs)]
        for i, (source, r) in enumerate(zip(node.inputs, read)):
            if source.twice:
                require(r.kind == "tensor", f"{path}.inputs[{i}].input_fn", f"{TWICE!r} takes a tensor, got a {r.kind}")
                read[i] = Kind("list")
        if block.merge_inputs_into_list:
            others = [(s.name, r.kind) for s, r in zip(node.inputs, read) if r.kind != "tensor"]
            require(not others, f"{path}.inputs", f"input {others[0] if others else ''} is not a tensor: "
                    "merge_inputs_into_list makes a list of tensors")
            kind = Kind("list")
        else:
            others = [(s.name, r.kind) for s, r in zip(node.inputs, read) if r.kind != "tensor"]
            if len(read) > 1 and others:
                raise ConfigError(f"{path}.inputs", f"input {others[0][0]!r} gives a {others[0][1]}: only tensors "
                                  "are concatenated (give it a block of its own)")
            kind = read[0] if len(read) == 1 else Kind("tensor")
        require(kind.kind != "loss", f"{path}.inputs", "an AuxiliaryLoss block's output is read by nothing")
        for k, keras in enumerate(node.keras_layers):
            where = {"keras_layer": f"{path}.keras_layer", "recurrent": f"{path}.recurrent.keras_layer"}.get(
                node.layer, f"{path}.layers[{k}].keras_layer")
            require((keras.class_name == "Cross") == (node.layer == "recurrent"), f"{where}.class_name",
                    "a Cross layer runs in a recurrent block (DCN-v2's cross network), and a recurrent block "
                    "runs a Cross layer here")
            if node.layer == "recurrent":
                require(block.recurrent.HasField("fixed_input_index") and block.recurrent.fixed_input_index < 2,
                        f"{path}.recurrent.fixed_input_index", "is required here: 0 or 1, the place of x0 in the "
                        "[x0, x] list a Cross layer reads")
                require(block.recurrent.num_steps > 0, f"{path}.recurrent.num_steps", "must be at least 1")
            _check_keras_layer(keras, where)
            wanted = BLOCKS[keras.class_name].reads
            if kind.kind != wanted:
                what = {"sequence": "a sequence input (an input layer with output_seq_and_normal_feature)",
                        "list": "a list (an input layer with only_output_feature_list, an MMoE layer, or "
                                "merge_inputs_into_list)",
                        "tensor": "a tensor (a feature group, or a block giving one)", "loss": "a loss"}
                raise ConfigError(where if k else f"{path}.inputs", f"layer {keras.class_name} reads {what[wanted]}; "
                                  f"its input here is {what[kind.kind].split(' (')[0]}")
            if kind.group:
                require(self.groups_read.setdefault(node.name, kind.group) == kind.group, f"{path}.inputs",
                        f"block {node.name!r} reads groups {self.groups_read[node.name]!r} and {kind.group!r} in "
                        "two calls of its package: its layer's width is one group's")
            if keras.class_name in ("DIN", "BST"):
                _check_sequence_widths(keras, self.groups[kind.group], self.sequence_names, self.dims, where)
            if keras.class_name == "SENet":
                _check_senet(keras.senet, self.groups.get(kind.group), self.dims, where)
            if keras.class_name == "AuxiliaryLoss":
                require(not node.package, where, "an AuxiliaryLoss block belongs to the backbone, not a package")
                require(len(node.inputs) == 2, f"{path}.inputs", "an AuxiliaryLoss reads two views")
            given_kind = BLOCKS[keras.class_name].gives
            kind = Kind(given_kind, kind.group if given_kind in ("sequence",) else "")
        if kind.kind == "sequence" and node.layer == "identity":
            raise ConfigError(f"{path}.inputs", "a sequence input is read by a DIN, BST or SeqAugment layer only")
        return kind


def _input_layer_kind(node: BlockInputs, path: str) -> Kind:
    layer = node.block.input_layer
    require(len(node.inputs) == 1 and node.inputs[0].kind == "group", f"{path}.inputs",
            "an input layer reads exactly one feature_group_name")
    for field in _UNSUPPORTED_INPUT_LAYER:
        require(not layer.HasField(field) or not getattr(layer, field), f"{path}.input_layer.{field}",
                "is not supported here: an input layer gives its group's features concatenated, as a list "
                "(only_output_feature_list) or, with output_seq_and_normal_feature, its sequences and target apart")
    require(not (layer.do_batch_norm and layer.do_layer_norm), f"{path}.input_layer",
            "do_batch_norm and do_layer_norm cannot both be set")
    require(0 <= layer.dropout_rate < 1, f"{path}.input_layer.dropout_rate", "must be in [0, 1)")
    require(not (layer.output_seq_and_normal_feature and layer.only_output_feature_list), f"{path}.input_layer",
            "output_seq_and_normal_feature and only_output_feature_list cannot both be set")
    group = node.inputs[0].name
    if layer.output_seq_and_normal_feature or layer.only_output_feature_list:
        require(layer.concat_seq_feature, f"{path}.input_layer.concat_seq_feature",
                "the sequences are concatenated here (false: a list of them, not supported)")
        require(not (layer.do_batch_norm or layer.do_layer_norm or layer.dropout_rate), f"{path}.input_layer",
                "a sequence input or a feature list takes no normalization or dropout here")
        return Kind("sequence" if layer.output_seq_and_normal_feature else "list", group)
    return Kind("tensor")


def _block_inputs(block: pipeline_pb2.Block, names: Collection[str], packages: Collection[str],
                  groups: Mapping[str, pipeline_pb2.FeatureGroup], sequence_names: Collection[str],
                  path: str, package: str) -> BlockInputs:
    require(len(block.inputs) > 0, f"{path}.inputs", f"block {block.name!r} needs at least one input")
    require(not block.HasField("extra_input_fn"), f"{path}.extra_input_fn",
            "a Python expression is not supported here (EasyRec's extra_input_fn)")
    require(block.input_concat_axis == -1, f"{path}.input_concat_axis",
            "inputs are concatenated on the last axis only (-1)")
    inputs = []
    for j, item in enumerate(block.inputs):
        where = f"{path}.inputs[{j}]"
        kind = item.WhichOneof("name")
        require(kind is not None, where, "an input is a feature_group_name, a block_name, a package_name or "
                "use_package_input")
        require(not item.HasField("input_slice"), f"{where}.input_slice",
                "Python expressions on an input (input_slice) are not run here: give the block its input as is")
        twice = " ".join(item.input_fn.split()) == TWICE
        require(not item.HasField("input_fn") or twice, f"{where}.input_fn",
                f"Python expressions on an input are not run here (only {TWICE!r}, the input twice, is taken)")
        require(kind == "package_name" or not item.package_input, f"{where}.package_input",
                "is the input of a package_name")
        if item.ignore_input:
            continue
        name = getattr(item, kind)
        if kind == "use_package_input":
            require(bool(name), f"{where}.use_package_input", "cannot be false")
            inputs.append(Source("package_input"))
        elif kind == "package_name":
            require(name in packages, f"{where}.package_name", f"{name!r} is not a package "
                    f"(packages: {sorted(packages)})")
            require(not item.package_input or item.package_input in names or item.package_input in packages,
                    f"{where}.package_input", f"{item.package_input!r} is not a block this block reads (the "
                    "backbone's, or its own package's) or a package")
            inputs.append(Source("package", name, item.package_input))
        elif kind == "block_name":
            require(name in names, f"{where}.block_name", f"{name!r} is not a block this block reads (the "
                    f"backbone's, or its own package's: {sorted(names)})")
            require(name != block.name, f"{where}.block_name", f"block {name!r} reads itself")
            inputs.append(Source("block", name, twice=twice))
        else:
            require(name in groups, f"{where}.feature_group_name",
                    f"{name!r} is not a model_config.feature_groups group_name (groups: {sorted(groups)})")
            require(groups[name].wide_deep != pipeline_pb2.FeatureGroup.WIDE, f"{where}.feature_group_name",
                    f"feature group {name!r} is WIDE (first-order weights only): a block reads DEEP or WIDE_AND_DEEP")
            sequences = [n for n in groups[name].feature_names if n in sequence_names]
            reads_sequence = block.WhichOneof("layer") == "input_layer" and \
                block.input_layer.output_seq_and_normal_feature
            require(not sequences or reads_sequence, f"{where}.feature_group_name",
                    f"feature group {name!r} holds SequenceFeature(s) {sequences}: read it with an input layer "
                    "with output_seq_and_normal_feature, for a DIN or BST block")
            inputs.append(Source("group", name, twice=twice))
    require(bool(inputs), f"{path}.inputs", f"every input of block {block.name!r} is ignore_input")
    return BlockInputs(block, tuple(inputs), package)


def _check_senet(senet: pipeline_pb2.SENet, group: Optional[pipeline_pb2.FeatureGroup], dims: Mapping[str, int],
                 path: str) -> None:
    require(senet.reduction_ratio > 0, f"{path}.senet.reduction_ratio", "must be at least 1")
    require(senet.num_squeeze_group > 0, f"{path}.senet.num_squeeze_group", "must be at least 1")
    require(group is not None, path, "SENet reads a feature list (an input layer with only_output_feature_list)")
    assert group is not None
    bad = [n for n in group.feature_names if (dims.get(n) or 1) % senet.num_squeeze_group]
    require(not bad, f"{path}.senet.num_squeeze_group", f"features {bad} of group {group.group_name!r}: "
            f"each feature's width must be a multiple of num_squeeze_group ({senet.num_squeeze_group})")


def _check_keras_layer(keras: pipeline_pb2.KerasLayer, path: str) -> None:
    require(keras.class_name in LAYER_CLASSES, f"{path}.class_name",
            f"{keras.class_name!r} is not one of the layers run here ({', '.join(LAYER_CLASSES)})")
    field = BLOCKS[keras.class_name].params
    if not field:
        require(keras.WhichOneof("params") is None, f"{path}.{keras.WhichOneof('params')}",
                f"a {keras.class_name} layer takes no settings here (DCN-v2's full-rank cross)")
        return
    require(keras.WhichOneof("params") == field, f"{path}.{field}",
            f"a {keras.class_name} layer takes its settings in {field} {{ ... }}")
    if field == "mlp":
        check_mlp(keras.mlp, f"{path}.mlp")
    elif field == "din":
        check_mlp(keras.din.attention_dnn, f"{path}.din.attention_dnn")
        units = list(keras.din.attention_dnn.hidden_units)
        require(units[-1] == 1, f"{path}.din.attention_dnn.hidden_units",
                f"the last layer gives the score: one unit, got {units}")
        require(keras.din.attention_normalizer in ("softmax", "sigmoid"), f"{path}.din.attention_normalizer",
                f"{keras.din.attention_normalizer!r} is not softmax or sigmoid")
    elif field == "mmoe":
        require(keras.mmoe.num_task > 0, f"{path}.mmoe.num_task", "must be at least 1")
        require(keras.mmoe.num_expert > 0, f"{path}.mmoe.num_expert", "must be at least 1")
        require(keras.mmoe.HasField("expert_mlp"), f"{path}.mmoe.expert_mlp",
                "is required here (EasyRec's MMoE without experts reads a list of them: not supported)")
        check_mlp(keras.mmoe.expert_mlp, f"{path}.mmoe.expert_mlp")
    elif field == "masknet":
        require(len(keras.masknet.mask_blocks) > 0, f"{path}.masknet.mask_blocks", "at least one mask block")
        for i, block in enumerate(keras.masknet.mask_blocks):
            where = f"{path}.masknet.mask_blocks[{i}]"
            require(block.HasField("reduction_factor") or block.aggregation_size > 0, where,
                    "give reduction_factor or aggregation_size (the aggregation layer's size)")
            require(not block.HasField("reduction_factor") or block.reduction_factor > 0,
                    f"{where}.reduction_factor", "must be > 0")
        if keras.masknet.HasField("mlp"):
            check_mlp(keras.masknet.mlp, f"{path}.masknet.mlp")
    elif field == "seq_aug":
        for name in ("mask_rate", "crop_rate", "reorder_rate"):
            require(0 <= getattr(keras.seq_aug, name) <= 1, f"{path}.seq_aug.{name}", "must be in [0, 1]")
    elif field == "st_params":
        fields = keras.st_params.fields
        loss = fields["loss_type"].string_value if "loss_type" in fields else ""
        require(loss in LOSS_TYPES, f"{path}.st_params", f"loss_type {loss!r} is not one of {', '.join(LOSS_TYPES)}")
        unknown = sorted(set(fields) - {"loss_type", "loss_weight", "temperature"})
        require(not unknown, f"{path}.st_params", f"unknown settings {unknown} (loss_type, loss_weight, temperature)")
        require("temperature" not in fields or fields["temperature"].number_value > 0, f"{path}.st_params",
                "temperature must be > 0")
    elif field == "bst":
        bst = keras.bst
        for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "max_position_embeddings"):
            require(getattr(bst, name) > 0, f"{path}.bst.{name}", "is required and must be at least 1")
        require(bst.hidden_size % bst.num_attention_heads == 0, f"{path}.bst.num_attention_heads",
                f"{bst.num_attention_heads} heads do not divide hidden_size {bst.hidden_size}")
        require(bst.hidden_act in BST_ACTIVATIONS, f"{path}.bst.hidden_act",
                f"{bst.hidden_act!r} is not one of {', '.join(BST_ACTIVATIONS)}")
        require(bst.target_item_position in TARGET_POSITIONS, f"{path}.bst.target_item_position",
                f"{bst.target_item_position!r} is not one of {', '.join(TARGET_POSITIONS)}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            require(0 <= getattr(bst, name) < 1, f"{path}.bst.{name}", "must be in [0, 1)")


def _check_sequence_widths(keras: pipeline_pb2.KerasLayer, group: pipeline_pb2.FeatureGroup,
                           sequence_names: Collection[str], dims: Mapping[str, int], path: str) -> None:
    target = sum(dims[n] for n in group.feature_names if n not in sequence_names)
    width = sum(dims[n] for n in group.feature_names if n in sequence_names)
    if keras.class_name == "DIN":
        require(0 < target <= width, path, f"feature group {group.group_name!r}: DIN compares its target "
                f"features ({target} wide) with its sequences ({width} wide): the target must be there and no "
                "wider (a narrower one is zero-padded)")
    elif keras.bst.target_item_position != "ignore" and target:
        require(target == width, path, f"feature group {group.group_name!r}: BST puts its target features ({target} "
                f"wide) among its sequences ({width} wide) as one more position: they must be as wide")


def check_mlp(mlp: pipeline_pb2.MLP, path: str) -> None:
    """An MLP layer's settings that can run: at least one layer, ratios in [0, 1), no extra outputs."""
    require(len(mlp.hidden_units) > 0, f"{path}.hidden_units", "at least one layer is required")
    require(all(u > 0 for u in mlp.hidden_units), f"{path}.hidden_units", "every layer needs at least one unit")
    require(all(0 <= r < 1 for r in mlp.dropout_ratio), f"{path}.dropout_ratio", "every ratio must be in [0, 1)")
    require(not mlp.add_to_outputs, f"{path}.add_to_outputs",
            "an MLP's extra prediction output is not supported (the model's outputs are its tasks')")
