"""Plain descriptions of features and embedding tables, derived from the config.

The rest of the package reads these, never the protobuf, so a model or a
parser has one obvious input and the config's quirks stay in one place.
"""
import dataclasses
from typing import Collection, Dict, List, Optional, Sequence, Tuple

from easyonline.features.label_kinds import label_kinds
from easyonline.protos import pipeline_pb2

_FT = pipeline_pb2.DataConfig.FieldType
# String ids hash to Fingerprint64 modulo 2^63 - 1, the same [0, 2^63) space as int ids.
HASH_BUCKETS = 2**63 - 1
# Padding values and negative int ids become this id, which always looks up as zeros.
PADDING_ID = -1


@dataclasses.dataclass(frozen=True)
class TableSpec:
    """One dynamic embedding table; several features may share it."""
    name: str
    dim: int
    initializer_stddev: float
    admission: Optional[pipeline_pb2.AdmissionConfig] = None
    eviction: Optional[pipeline_pb2.EvictionConfig] = None

    @property
    def keeps_statistics(self) -> bool:
        return self.admission is not None or self.eviction is not None


@dataclasses.dataclass(frozen=True)
class IdFeature:
    """A categorical feature: one id (or several, for tags) per sample.

    Two kinds are derived from other inputs (see cross_ids_numpy.py): a cross
    (``combo``: one single-input IdFeature per input, whose ids are crossed)
    and a bucketized number (``boundaries``: the bucket index is the id).

    A sequence (``sequence``) is split like tags but not pooled: its first
    ``max_length`` ids (0: all) are the most recent, and the model reads them
    position by position (``Model.sequence_input``). Weighted tags
    (``kv_separator``) carry a weight per id, parsed into the feature
    ``weights_key(name)``. A sequence of several ids a position
    (``multi_separator``) has its ids flat and each one's position under
    ``positions_key(name)``. A sequence of numbers fed as numbers
    (``raw_width``: RawFeature without boundaries) is one too: a position's
    ids are its columns 0 .. raw_width - 1, weighted by its numbers, so its
    row is a learned linear projection of them.
    """
    name: str
    input_name: str
    table: str
    string_ids: bool
    multi_value: bool
    separator: str
    combiner: str
    padding: Tuple[str, ...] = ()
    combo: Tuple["IdFeature", ...] = ()
    hash_buckets: int = 0
    boundaries: Tuple[float, ...] = ()
    sequence: bool = False
    max_length: int = 0
    kv_separator: str = ""
    multi_separator: str = ""  # a sequence's seq_multi_sep: several ids a position
    raw_width: int = 0  # a sequence of numbers fed as numbers: how many a position (raw_input_dim)

    @property
    def input_names(self) -> Tuple[str, ...]:
        """Every input field the ids are made from."""
        return tuple(c.input_name for c in self.combo) if self.combo else (self.input_name,)

    @property
    def split_inputs(self) -> Tuple[str, ...]:
        """The input fields split into several values (decoded as strings)."""
        parts = self.combo or (self,)
        return tuple(p.input_name for p in parts if p.multi_value and (p.sequence or not p.boundaries))

    @property
    def weighted(self) -> bool:
        return bool(self.kv_separator)

    @property
    def positioned(self) -> bool:
        """Its ids come flat with each one's position (``positions_key``): several ids make a position."""
        return bool(self.multi_separator) or self.raw_width > 0

    @property
    def carries_weights(self) -> bool:
        """A weight per id under ``weights_key``: a weighted tag's, or a raw sequence's numbers."""
        return self.weighted or self.raw_width > 0


def positions_key(feature_name: str) -> str:
    """Where a sequence of several values a position (``seq_multi_sep``) keeps each id's position (int64,
    ragged like its ids): its ids are flat, one sample's after another, and a position is the ``combiner``
    of its ids' rows."""
    return f"{feature_name}/positions"


def weights_key(feature_name: str) -> str:
    """The parsed features' key of a weighted tag feature's weights (not a field name: it has a slash)."""
    return feature_name + "/weights"


@dataclasses.dataclass(frozen=True)
class RawFeature:
    """A numeric feature fed to the dense part of the model; scaled to (x - min_val) / (max_val - min_val)
    when max_val > min_val.

    ``dim`` > 1 (EasyRec's raw_input_dim): a vector, read from a string of ``dim`` numbers joined by
    ``separator`` (raw_vectors.py), fed as ``dim`` columns; its features are [B, dim], a number's [B].
    """
    name: str
    input_name: str
    min_val: float = 0.0
    max_val: float = 0.0
    dim: int = 1
    separator: str = "|"

    @property
    def is_vector(self) -> bool:
        return self.dim > 1


@dataclasses.dataclass(frozen=True)
class InputField:
    name: str
    field_type: int
    default: str


@dataclasses.dataclass(frozen=True)
class FeatureSpecs:
    input_fields: Tuple[InputField, ...]
    separator: str
    label_names: Tuple[str, ...]
    id_features: Tuple[IdFeature, ...]
    raw_features: Tuple[RawFeature, ...]
    tables: Dict[str, TableSpec]
    #: the kind of each label a task learns from, by name, from the model's tasks ("binary": 0 or 1;
    #: "regression": any finite number); the parser checks these labels only
    label_kinds: Dict[str, str] = dataclasses.field(default_factory=dict)
    #: data_config.sample_weight: the input field weighing each sample in the loss ("": none)
    sample_weight: str = ""

    def label_kind(self, name: str) -> Optional[str]:
        """The kind ``name`` is checked as; None when no task learns from it. Specs made without kinds
        check the first label as binary (a single ranking task's)."""
        if not self.label_kinds:
            return "binary" if self.label_names and name == self.label_names[0] else None
        return self.label_kinds.get(name)

    def features_of_table(self, table: str) -> List[IdFeature]:
        return [f for f in self.id_features if f.table == table]

    #: the sequence features that must be as long as each other in every sample (those of one target
    #: attention, model_config.feature_groups.sequence_features), one tuple per attention
    aligned_sequences: Tuple[Tuple[str, ...], ...] = ()

    @property
    def dense_width(self) -> int:
        """Columns of the dense part: one per number, ``dim`` per vector raw feature."""
        return sum(f.dim for f in self.raw_features)

    def dense_columns(self, names: Sequence[str]) -> List[int]:
        """The dense part's columns of the raw features in ``names``, in that order (other names skipped)."""
        starts, start = {}, 0
        for feature in self.raw_features:
            starts[feature.name] = (start, feature.dim)
            start += feature.dim
        return [c for n in names if n in starts for c in range(starts[n][0], starts[n][0] + starts[n][1])]


def is_raw_sequence(fc: pipeline_pb2.FeatureConfig) -> bool:
    """A SequenceFeature of numbers fed as numbers (RawFeature values, no boundaries): its positions are
    projected, its table is its own."""
    return (fc.feature_type == pipeline_pb2.FeatureConfig.SequenceFeature
            and fc.sub_feature_type == pipeline_pb2.FeatureConfig.RawFeature and not fc.boundaries)


def is_id_feature(fc: pipeline_pb2.FeatureConfig) -> bool:
    """True for every feature with an embedding table: all but plain RawFeatures (bucketized ones have one)."""
    return fc.feature_type != pipeline_pb2.FeatureConfig.RawFeature or len(fc.boundaries) > 0


def build_feature_specs(config: pipeline_pb2.PipelineConfig) -> FeatureSpecs:
    """Assumes a validated config (see easyonline.config.validate)."""
    data = config.data_config
    types = {f.input_name: f.input_type for f in data.input_fields}
    fields = tuple(InputField(f.input_name, f.input_type, f.default_val) for f in data.input_fields)
    id_features, raw_features, tables = [], [], {}
    for fc in config.feature_configs:
        input_name = fc.input_names[0]
        name = fc.feature_name or input_name
        if not is_id_feature(fc):
            raw_features.append(RawFeature(name, input_name, fc.min_val, fc.max_val, max(fc.raw_input_dim, 1),
                                           fc.separator))
            continue
        table = fc.embedding_name or name
        tables.setdefault(table, TableSpec(
            table, fc.embedding_dim, fc.initializer_stddev,
            admission=fc.admission if fc.HasField("admission") and fc.admission.WhichOneof("policy") else None,
            eviction=fc.eviction if fc.HasField("eviction") else None))
        combo: Tuple[IdFeature, ...] = ()
        if fc.feature_type == pipeline_pb2.FeatureConfig.ComboFeature:
            seps = list(fc.combo_input_seps) + [""] * (len(fc.input_names) - len(fc.combo_input_seps))
            combo = tuple(IdFeature(name=f"{name}/{part}", input_name=part, table=table,
                                    string_ids=types[part] == _FT.STRING, multi_value=bool(sep), separator=sep or "|",
                                    combiner=fc.combiner, padding=tuple(fc.padding))
                          for part, sep in zip(fc.input_names, seps))
        sequence = fc.feature_type == pipeline_pb2.FeatureConfig.SequenceFeature
        id_features.append(IdFeature(
            name=name, input_name=input_name, table=table,
            string_ids=types[input_name] == _FT.STRING and not fc.boundaries
            and not (sequence and fc.sub_feature_type == pipeline_pb2.FeatureConfig.RawFeature),
            multi_value=fc.feature_type == pipeline_pb2.FeatureConfig.TagFeature or sequence
            or any(c.multi_value for c in combo),
            separator=fc.separator, combiner=fc.combiner, padding=tuple(fc.padding), combo=combo,
            hash_buckets=fc.hash_bucket_size, boundaries=tuple(fc.boundaries), sequence=sequence,
            max_length=sequence_bound(fc) if sequence else 0,
            kv_separator=fc.kv_separator if fc.feature_type == pipeline_pb2.FeatureConfig.TagFeature else "",
            multi_separator=fc.seq_multi_sep if sequence else "",
            raw_width=max(fc.raw_input_dim, 1) if is_raw_sequence(fc) else 0))
    return FeatureSpecs(fields, data.separator, tuple(data.label_fields), tuple(id_features),
                        tuple(raw_features), tables, label_kinds=label_kinds(config), sample_weight=data.sample_weight,
                        aligned_sequences=tuple(g.sequences for g in sequence_groups(
                            config.model_config, sequence_feature_names(config))))


def sequence_bound(fc: pipeline_pb2.FeatureConfig) -> int:
    """The ids a SequenceFeature keeps per sample: the smaller of sequence_length and max_seq_len set (0: all)."""
    bounds = [b for b in (fc.sequence_length, fc.max_seq_len) if b > 0]
    return min(bounds) if bounds else 0


@dataclasses.dataclass(frozen=True)
class SequenceGroup:
    """One target attention (a FeatureGroup's sequence_features entry), its seq_att_maps flattened in order."""
    name: str
    feature_group: str
    keys: Tuple[str, ...]
    hist_seqs: Tuple[str, ...]
    aux_hist_seqs: Tuple[str, ...]
    config: pipeline_pb2.SeqAttGroup
    backbone: bool = False  # a feature group a backbone reads as sequence and target (no attention of its own)

    @property
    def sequences(self) -> Tuple[str, ...]:
        """Every sequence it reads (its positions must line up)."""
        return self.hist_seqs + self.aux_hist_seqs


def sequence_groups(model_config: pipeline_pb2.ModelConfig, sequence_names: Collection[str]) -> List[SequenceGroup]:
    """Every target attention of the feature groups, in config order (EasyRec's SeqInputLayer reads each
    group's maps in order: keys and sequences concatenated), then the groups a backbone reads as sequence and
    target (``backbone_sequence_groups``; ``sequence_names``: the SequenceFeatures' names)."""
    groups = []
    for group in model_config.feature_groups:
        for seq in group.sequence_features:
            maps = seq.seq_att_map
            groups.append(SequenceGroup(seq.group_name or group.group_name, group.group_name,
                                        tuple(k for m in maps for k in m.key), tuple(h for m in maps for h in m.hist_seq),
                                        tuple(a for m in maps for a in m.aux_hist_seq), seq))
    return groups + backbone_sequence_groups(model_config, sequence_names)


def backbone_sequence_groups(model_config: pipeline_pb2.ModelConfig,
                             sequence_names: Collection[str]) -> List[SequenceGroup]:
    """The feature groups a backbone's input layer reads with ``output_seq_and_normal_feature`` (EasyRec's
    form for its DIN and BST layers), each a SequenceGroup of the group's name: its SequenceFeatures (in the
    group's order) the hist_seqs, its other features the keys (the target). So the parsers check that their
    positions line up, and the model reads them as any target attention's (``sequence_input``)."""
    read = {block.inputs[0].feature_group_name for block in model_config.backbone.blocks
            if block.WhichOneof("layer") == "input_layer" and block.input_layer.output_seq_and_normal_feature
            and len(block.inputs) == 1 and block.inputs[0].WhichOneof("name") == "feature_group_name"}
    groups = []
    for group in model_config.feature_groups:
        if group.group_name not in read:
            continue
        keys = tuple(n for n in group.feature_names if n not in sequence_names)
        hist = tuple(n for n in group.feature_names if n in sequence_names)
        config = pipeline_pb2.SeqAttGroup(group_name=group.group_name, allow_key_transform=True,
                                          seq_att_map=[pipeline_pb2.SeqAttMap(key=keys, hist_seq=hist)])
        groups.append(SequenceGroup(group.group_name, group.group_name, keys, hist, (), config, backbone=True))
    return groups


def sequence_feature_names(config: pipeline_pb2.PipelineConfig) -> List[str]:
    """The names of the config's SequenceFeatures."""
    return [fc.feature_name or fc.input_names[0] for fc in config.feature_configs
            if fc.feature_type == pipeline_pb2.FeatureConfig.SequenceFeature]
