"""Checks of behaviour sequences and weighted tags: SequenceFeatures, kv_separator, and the target attentions
of ``feature_groups.sequence_features`` (docs/config_reference.md#sequence-features)."""
from typing import Dict

from easyonline.core.errors import ConfigError, require
from easyonline.features.feature_spec import backbone_sequence_groups, is_raw_sequence
from easyonline.protos import pipeline_pb2

_FC = pipeline_pb2.FeatureConfig
_SEQUENCE_ONLY = ("sub_feature_type", "sequence_length", "max_seq_len", "seq_multi_sep")
NORMALIZERS = ("softmax", "sigmoid")


def feature_name(feature: pipeline_pb2.FeatureConfig) -> str:
    return feature.feature_name or feature.input_names[0]


def validate_multi_value(feature: pipeline_pb2.FeatureConfig, data_separator: str, path: str) -> None:
    """A TagFeature's or SequenceFeature's separators, a SequenceFeature's sub type, kv_separator's feature type."""
    kind = feature.feature_type
    sequence = kind == _FC.SequenceFeature
    for field in _SEQUENCE_ONLY:
        require(sequence or not feature.HasField(field), f"{path}.{field}", "only a SequenceFeature has it")
    require(kind == _FC.TagFeature or not feature.HasField("kv_separator"), f"{path}.kv_separator",
            "only a TagFeature has weighted values")
    if kind not in (_FC.TagFeature, _FC.SequenceFeature):
        return
    require(len(feature.separator) == 1, f"{path}.separator", f"must be exactly one character, got {feature.separator!r}")
    require(feature.separator != data_separator, f"{path}.separator", "must differ from data_config.separator")
    if feature.HasField("kv_separator"):
        kv = feature.kv_separator
        require(len(kv) == 1 and kv not in (feature.separator, data_separator), f"{path}.kv_separator",
                f"must be one character other than separator and data_config.separator, got {kv!r}")
    if feature.HasField("seq_multi_sep"):
        multi = feature.seq_multi_sep
        require(len(multi) == 1 and multi not in (feature.separator, data_separator), f"{path}.seq_multi_sep",
                f"must be one character other than separator and data_config.separator, got {multi!r}")
        require(feature.combiner in ("mean", "sum"), f"{path}.combiner",
                f"how a position's values are pooled: 'mean' or 'sum', got {feature.combiner!r}")
    if sequence:
        sub = feature.sub_feature_type
        require(sub in (_FC.IdFeature, _FC.RawFeature), f"{path}.sub_feature_type",
                f"a sequence's values are IdFeature or RawFeature, not {_FC.FeatureType.Name(sub)}")
        raw = is_raw_sequence(feature)  # numbers fed as numbers: projected
        require(not raw or not feature.embedding_name, f"{path}.embedding_name",
                "a sequence of numbers without boundaries has a table of its own (its rows project its numbers)")
        require(not raw or feature.raw_input_dim <= 1 or feature.HasField("seq_multi_sep"), f"{path}.seq_multi_sep",
                f"raw_input_dim {feature.raw_input_dim} numbers a position are joined by seq_multi_sep: set it")
        require(sub == _FC.RawFeature or not feature.boundaries, f"{path}.boundaries",
                "only a sequence of numbers (sub_feature_type: RawFeature) is bucketized")


def validate_shared_sequence_tables(config: pipeline_pb2.PipelineConfig) -> None:
    """A SequenceFeature sharing a table (embedding_name) reads its ids as the table's other features do: all
    hashed strings, or all ints; else the same item would get two rows. No feature shares the table of a
    sequence of numbers fed as numbers (its rows are its columns' projections, keyed 0, 1, ...)."""
    raw = {feature_name(f) for f in config.feature_configs if is_raw_sequence(f)}
    for i, feature in enumerate(config.feature_configs):
        require(feature.embedding_name not in raw, f"feature_configs[{i}].embedding_name",
                f"{feature.embedding_name!r} is a sequence of numbers without boundaries: its table is its own")
    types = {f.input_name: f.input_type for f in config.data_config.input_fields}
    kinds: Dict[str, set] = {}
    for feature in config.feature_configs:
        if feature.feature_type == _FC.RawFeature and not feature.boundaries:
            continue
        string = all(types.get(n) == pipeline_pb2.DataConfig.STRING for n in feature.input_names) \
            and not feature.boundaries
        kinds.setdefault(feature.embedding_name or feature_name(feature), set()).add((string, feature_name(feature)))
    for i, feature in enumerate(config.feature_configs):
        if feature.feature_type != _FC.SequenceFeature or not feature.embedding_name:
            continue
        table = kinds[feature.embedding_name]
        if len({s for s, _ in table}) > 1:
            strings = sorted(n for s, n in table if s)
            ints = sorted(n for s, n in table if not s)
            raise ConfigError(f"feature_configs[{i}].embedding_name",
                              f"table {feature.embedding_name!r} is read as hashed strings by {strings} and as int ids "
                              f"by {ints}: give their input fields the same type (STRING, or INT64), so that a "
                              "sequence's ids find the item's rows")


def _dims(config: pipeline_pb2.PipelineConfig) -> Dict[str, int]:
    return {feature_name(f): f.embedding_dim for f in config.feature_configs}


def validate_attention_dnn(dnn: pipeline_pb2.DNN, path: str) -> None:
    """A target attention's DNN ends in one linear unit: the score of a position."""
    require(len(dnn.hidden_units) > 0 and dnn.hidden_units[-1] == 1, f"{path}.hidden_units",
            f"the attention DNN's last layer gives one score per position: it must end with 1, got "
            f"{list(dnn.hidden_units)}")


def validate_sequence_groups(config: pipeline_pb2.PipelineConfig) -> None:
    """Every target attention names existing keys and sequences of matching widths; every SequenceFeature is read
    by one, never as a plain group feature."""
    features = {feature_name(f): f for f in config.feature_configs}
    dims = _dims(config)
    sequences = {n for n, f in features.items() if f.feature_type == _FC.SequenceFeature}
    used, names = set(), set()
    # a backbone's input layer may read a group's sequences and target apart (output_seq_and_normal_feature)
    backbone = {g.name: g for g in backbone_sequence_groups(config.model_config, sequences)}
    for i, group in enumerate(config.model_config.feature_groups):
        gpath = f"model_config.feature_groups[{i}]"
        if group.group_name in backbone:
            used.update(backbone[group.group_name].hist_seqs)
            require(bool(backbone[group.group_name].hist_seqs), f"{gpath}.feature_names",
                    f"group {group.group_name!r} has no SequenceFeature, and a backbone's input layer reads it with "
                    "output_seq_and_normal_feature (for a DIN or BST layer)")
            for j, name in enumerate(group.feature_names):
                require(name in sequences or dims.get(name, 0) > 0, f"{gpath}.feature_names[{j}]",
                        f"{name!r} has no embedding: the target features of a sequence input are ids (a raw "
                        "feature belongs in another group)")
        for j, name in enumerate(group.feature_names):
            require(name not in sequences or group.group_name in backbone, f"{gpath}.feature_names[{j}]",
                    f"{name!r} is a SequenceFeature: a group reads it through sequence_features.seq_att_map.hist_seq "
                    "(or a backbone's input layer with output_seq_and_normal_feature)")
        for k, seq in enumerate(group.sequence_features):
            path = f"{gpath}.sequence_features[{k}]"
            name = seq.group_name or group.group_name
            require(bool(name), f"{path}.group_name", "is required (or the feature group's group_name)")
            require(name not in names, f"{path}.group_name", f"duplicate sequence group name {name!r}")
            names.add(name)
            require(group.wide_deep != pipeline_pb2.FeatureGroup.WIDE, f"{gpath}.wide_deep",
                    "a group with sequence_features feeds the deep part (DEEP or WIDE_AND_DEEP)")
            require(len(seq.seq_att_map) > 0, f"{path}.seq_att_map", "at least one seq_att_map { key hist_seq } is required")
            key_width = seq_width = 0
            for m, att in enumerate(seq.seq_att_map):
                mpath = f"{path}.seq_att_map[{m}]"
                require(len(att.key) > 0, f"{mpath}.key", "at least one key (a feature of the target item) is required")
                require(len(att.hist_seq) > 0, f"{mpath}.hist_seq", "at least one hist_seq (a SequenceFeature) is required")
                for field in ("key", "hist_seq", "aux_hist_seq"):
                    for n, value in enumerate(getattr(att, field)):
                        require(value in features, f"{mpath}.{field}[{n}]", f"{value!r} is not a feature of feature_configs")
                        is_sequence = value in sequences
                        wanted = field != "key"
                        require(is_sequence == wanted, f"{mpath}.{field}[{n}]",
                                f"{value!r} is {'not ' if wanted else ''}a SequenceFeature" +
                                (" (keys are features of the target item)" if not wanted else ""))
                        require(field != "key" or dims[value] > 0, f"{mpath}.key[{n}]", f"{value!r} has no embedding")
                        used.add(value)
                key_width += sum(dims[k] for k in att.key)
                seq_width += sum(dims[h] for h in att.hist_seq)
            require(key_width == seq_width or seq.allow_key_transform, f"{path}.seq_att_map",
                    f"the keys are {key_width} wide and the sequences {seq_width}: they are compared position by "
                    "position, so they must be as wide (or set allow_key_transform)")
            if seq.HasField("seq_dnn"):
                validate_attention_dnn(seq.seq_dnn, f"{path}.seq_dnn")
    unread = sorted(sequences - used)
    if unread:
        raise ConfigError("model_config.feature_groups", f"SequenceFeature(s) {unread} are read by no target attention: "
                          "add feature_groups { sequence_features { seq_att_map { key: <target item feature> "
                          "hist_seq: <sequence> } } } (or list it in a group a backbone reads with output_seq_and_normal_feature)")


def sequence_group_names(config: pipeline_pb2.PipelineConfig) -> Dict[str, str]:
    """{target attention name: the feature group holding it}."""
    return {seq.group_name or group.group_name: group.group_name for group in config.model_config.feature_groups
            for seq in group.sequence_features}
