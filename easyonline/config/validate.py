"""Checks a PipelineConfig before anything starts, naming the bad field.

Everything that can be wrong with a config is found here, at start, so a
trainer never fails an hour into a stream because of a typo.
"""
import datetime
import logging

from kafka import KafkaProducer

from easyonline.features.sequence_settings import (validate_multi_value, validate_sequence_groups,
                                                  validate_shared_sequence_tables)
from easyonline.config.offset_info import parse_offset_info
from easyonline.config.kafka_settings import confluent_kafka_module, extra_consumer_config, librdkafka_config
from easyonline.core.errors import ConfigError, require
from easyonline.features.feature_spec import is_id_feature, is_raw_sequence
from easyonline.protos.model_towers import towers_in
from easyonline.features.parse_fn import load_parse_fn
from easyonline.models import registry
from easyonline.protos import pipeline_pb2
from easyonline.tasks.from_config import single_task
from easyonline.utils import timeparse

log = logging.getLogger(__name__)
COMBINERS = ("mean", "sum")
ACTIVATIONS = ("relu", "tanh", "sigmoid", "elu", "selu", "gelu", "swish", "linear", "dice")
_FT = pipeline_pb2.DataConfig.FieldType
_FC = pipeline_pb2.FeatureConfig.FeatureType
_NUMERIC = (_FT.INT32, _FT.INT64, _FT.FLOAT, _FT.DOUBLE, _FT.BOOL)
_ID_TYPES = (_FT.STRING, _FT.INT32, _FT.INT64)


def _validate_kafka(kafka: pipeline_pb2.KafkaInput, path: str) -> None:
    _validate_servers(kafka.server, f"{path}.server")
    require(bool(kafka.topic), f"{path}.topic", "is required")
    require(bool(kafka.group), f"{path}.group", "must not be empty")
    require(not (kafka.offset_info and kafka.offset_time), path,
            "give offset_info or offset_time, not both")
    if kafka.offset_info:
        parse_offset_info(kafka.offset_info, f"{path}.offset_info")
    extra_consumer_config(kafka, path)
    if kafka.client == pipeline_pb2.KafkaInput.CONFLUENT_KAFKA:
        librdkafka_config(kafka, path, "")  # a setting librdkafka lacks is named now, not at the first batch
        confluent_kafka_module(path)
    if kafka.offset_time:
        try:
            timeparse.parse_offset_time(kafka.offset_time)
        except ValueError as e:
            raise ConfigError(f"{path}.offset_time", str(e)) from None


def _validate_bad_input(config: pipeline_pb2.PipelineConfig) -> None:
    data = config.data_config
    require(0 < data.max_bad_fraction <= 1, "data_config.max_bad_fraction",
            f"must be in (0, 1] (1 = never stop), got {data.max_bad_fraction}")
    require(data.bad_input_window >= 1, "data_config.bad_input_window", "must be >= 1")
    require(data.max_message_bytes >= 1, "data_config.max_message_bytes", "must be >= 1")
    require(not data.dead_letter_topic or config.HasField("kafka_train_input"), "data_config.dead_letter_topic",
            "needs kafka_train_input (the dead-letter topic lives on its brokers)")


def _validate_data(data: pipeline_pb2.DataConfig) -> None:
    path = "data_config"
    require(len(data.input_fields) > 0, f"{path}.input_fields", "at least one input field is required")
    names = set()
    for i, field in enumerate(data.input_fields):
        fpath = f"{path}.input_fields[{i}]"
        require(bool(field.input_name), f"{fpath}.input_name", "is required")
        require(field.input_name not in names, f"{fpath}.input_name", f"duplicate input name {field.input_name!r}")
        names.add(field.input_name)
        if field.default_val and field.input_type in _NUMERIC:
            try:
                float(field.default_val)
            except ValueError:
                raise ConfigError(f"{fpath}.default_val", f"{field.default_val!r} is not a number") from None
    require(len(data.label_fields) > 0, f"{path}.label_fields", "at least one label field is required")
    for i, label in enumerate(data.label_fields):
        require(label in names, f"{path}.label_fields[{i}]", f"{label!r} is not an input field")
    if data.sample_weight:
        require(data.sample_weight in names, f"{path}.sample_weight", f"{data.sample_weight!r} is not an input field")
        weight_type = next(f.input_type for f in data.input_fields if f.input_name == data.sample_weight)
        require(weight_type != pipeline_pb2.DataConfig.STRING, f"{path}.sample_weight",
                 f"{data.sample_weight!r} is a STRING field; a weight is a number (give it input_type FLOAT)")
    require(len(data.separator) == 1, f"{path}.separator", f"must be exactly one character, got {data.separator!r}")
    require(0 < data.batch_size <= 1_000_000, f"{path}.batch_size", f"must be in [1, 1000000], got {data.batch_size}")
    if data.input_format == pipeline_pb2.DataConfig.CUSTOM:
        require(bool(data.parse_fn), f"{path}.parse_fn", "is required when input_format is CUSTOM")
        load_parse_fn(data.parse_fn, f"{path}.parse_fn")
    else:
        require(not data.parse_fn, f"{path}.parse_fn", "is only used with input_format: CUSTOM")
    require(0 < data.batch_timeout_ms <= 3_600_000, f"{path}.batch_timeout_ms", f"must be in [1, 3600000], got {data.batch_timeout_ms}")


def _validate_features(config: pipeline_pb2.PipelineConfig) -> None:
    types = {f.input_name: f.input_type for f in config.data_config.input_fields}
    labels = set(config.data_config.label_fields)
    require(len(config.feature_configs) > 0, "feature_configs", "at least one feature is required")
    names, table_dims, table_policies = set(), {}, {}
    for i, feature in enumerate(config.feature_configs):
        path = f"feature_configs[{i}]"
        kind = feature.feature_type
        combo = kind == pipeline_pb2.FeatureConfig.ComboFeature
        if combo:
            require(len(feature.input_names) >= 2, f"{path}.input_names", "a ComboFeature crosses two or more inputs")
        else:
            require(len(feature.input_names) == 1, f"{path}.input_names", "exactly one input name is required")
        for j, part in enumerate(feature.input_names):
            require(part in types, f"{path}.input_names[{j}]", f"{part!r} is not an input field of data_config")
            require(part not in labels, f"{path}.input_names[{j}]", f"{part!r} is a label field")
        input_name = feature.input_names[0]
        name = feature.feature_name or input_name
        require(name not in names, f"{path}.feature_name", f"duplicate feature name {name!r}")
        names.add(name)
        validate_multi_value(feature, config.data_config.separator, path)
        if feature.boundaries:
            require(kind in (pipeline_pb2.FeatureConfig.RawFeature, pipeline_pb2.FeatureConfig.SequenceFeature),
                     f"{path}.boundaries", "only a RawFeature (or a sequence of numbers) is bucketized")
            require(all(a < b for a, b in zip(feature.boundaries, feature.boundaries[1:])), f"{path}.boundaries",
                     f"must be strictly ascending, got {list(feature.boundaries)}")
        if feature.combo_input_seps:
            require(combo, f"{path}.combo_input_seps", "only a ComboFeature has combo_input_seps")
            require(len(feature.combo_input_seps) <= len(feature.input_names), f"{path}.combo_input_seps",
                     f"{len(feature.combo_input_seps)} separators for {len(feature.input_names)} input names")
            for j, sep in enumerate(feature.combo_input_seps):
                require(len(sep) <= 1 and sep != config.data_config.separator, f"{path}.combo_input_seps[{j}]",
                         f"must be empty or one character other than data_config.separator, got {sep!r}")
        for field in ("min_val", "max_val"):
            require(not feature.HasField(field) or (kind == pipeline_pb2.FeatureConfig.RawFeature
                                                     and not feature.boundaries), f"{path}.{field}",
                     "only a RawFeature without boundaries is scaled")
        if feature.hash_bucket_size and not combo:
            log.warning("%s.hash_bucket_size is ignored: a %s's ids need no buckets in a dynamic table", path,
                        pipeline_pb2.FeatureConfig.FeatureType.Name(kind))
        if feature.HasField("raw_input_dim"):
            require((kind == pipeline_pb2.FeatureConfig.RawFeature and not feature.boundaries)
                     or is_raw_sequence(feature), f"{path}.raw_input_dim",
                     "only a RawFeature, or a SequenceFeature of numbers, without boundaries is a vector")
            require(1 <= feature.raw_input_dim <= 4096, f"{path}.raw_input_dim",
                     f"must be in [1, 4096], got {feature.raw_input_dim}")
        if kind == pipeline_pb2.FeatureConfig.RawFeature and feature.raw_input_dim > 1:
            require(types[input_name] == _FT.STRING, f"{path}.input_names[0]",
                     f"a RawFeature with raw_input_dim > 1 reads its numbers from a STRING input field, {input_name!r} "
                     f"is {_FT.Name(types[input_name])}")
            require(len(feature.separator) == 1 and feature.separator != config.data_config.separator,
                     f"{path}.separator", f"must be one character other than data_config.separator (it joins the "
                     f"vector's numbers), got {feature.separator!r}")
            continue
        if kind == pipeline_pb2.FeatureConfig.RawFeature:
            require(types[input_name] in _NUMERIC, f"{path}.input_names[0]",
                     f"a RawFeature needs a numeric input field, {input_name!r} is {_FT.Name(types[input_name])}")
            if not feature.boundaries:
                continue
        else:
            for j, part in enumerate(feature.input_names):
                require(types[part] in _ID_TYPES, f"{path}.input_names[{j}]", f"an id feature needs a STRING, INT32 "
                         f"or INT64 input field, {part!r} is {_FT.Name(types[part])}")
        require(0 < feature.embedding_dim <= 4096, f"{path}.embedding_dim", f"must be in [1, 4096], got {feature.embedding_dim}")
        table = feature.embedding_name or name
        _validate_lifecycle(feature, path)
        for j, pad in enumerate(feature.padding):
            require(not feature.boundaries, f"{path}.padding[{j}]", "a bucketized RawFeature has no padding")
            if any(types[part] != _FT.STRING for part in feature.input_names):
                try:
                    int(pad)
                except ValueError:
                    raise ConfigError(f"{path}.padding[{j}]", f"{pad!r} is not an integer id") from None
        policy = (feature.admission.SerializeToString(deterministic=True), feature.eviction.SerializeToString(deterministic=True))
        if table in table_policies:
            require(table_policies[table] == policy, f"{path}.admission",
                     f"features sharing embedding_name {table!r} must have the same admission and eviction")
        table_policies[table] = policy
        if table in table_dims:
            require(table_dims[table] == feature.embedding_dim, f"{path}.embedding_dim",
                     f"features sharing embedding_name {table!r} must have the same embedding_dim ({table_dims[table]})")
        table_dims[table] = feature.embedding_dim
        require(feature.combiner in COMBINERS, f"{path}.combiner", f"{feature.combiner!r} is not one of {', '.join(COMBINERS)}")
        require(feature.initializer_stddev >= 0, f"{path}.initializer_stddev", "must be >= 0")
    validate_shared_sequence_tables(config)
    require(bool(table_dims), "feature_configs",
            "at least one feature with an embedding (IdFeature, TagFeature, ComboFeature, bucketized RawFeature) is required")


def _validate_lifecycle(feature: pipeline_pb2.FeatureConfig, path: str) -> None:
    admission = feature.admission
    which = admission.WhichOneof("policy")
    if which == "count_filter":
        require(admission.count_filter.min_count >= 1, f"{path}.admission.count_filter.min_count", "must be >= 1")
    elif which == "probability_filter":
        p = admission.probability_filter.probability
        require(0 < p <= 1, f"{path}.admission.probability_filter.probability", f"must be in (0, 1], got {p}")
    elif which == "show_click_score":
        score = admission.show_click_score
        require(score.nonclk_coeff >= 0 and score.click_coeff >= 0, f"{path}.admission.show_click_score",
                 "nonclk_coeff and click_coeff must be >= 0")
    if feature.HasField("eviction"):
        e = feature.eviction
        require(0 < e.show_click_decay_rate <= 1, f"{path}.eviction.show_click_decay_rate",
                 f"must be in (0, 1], got {e.show_click_decay_rate}")
        require(e.delete_after_unseen_days >= 0, f"{path}.eviction.delete_after_unseen_days", "must be >= 0")
        require(e.nonclk_coeff >= 0 and e.click_coeff >= 0, f"{path}.eviction", "nonclk_coeff and click_coeff must be >= 0")


def _validate_dnn(dnn: pipeline_pb2.DNN, path: str) -> None:
    for i, units in enumerate(dnn.hidden_units):
        require(0 < units <= 65536, f"{path}.hidden_units[{i}]", f"must be in [1, 65536], got {units}")
    require(0 <= dnn.dropout_ratio < 1, f"{path}.dropout_ratio", f"must be in [0, 1), got {dnn.dropout_ratio}")
    require(dnn.activation in ACTIVATIONS, f"{path}.activation", f"{dnn.activation!r} is not one of {', '.join(ACTIVATIONS)}")


def _validate_dnns(message, path: str) -> None:
    """Every DNN in a model's settings (at any depth: a tower's dnn, each task tower's), by its field path."""
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        values = list(value) if field.label == field.LABEL_REPEATED else [value]
        for i, item in enumerate(values):
            where = f"{path}.{field.name}" + (f"[{i}]" if field.label == field.LABEL_REPEATED else "")
            if field.message_type.name == "DNN":
                _validate_dnn(item, where)
            else:
                _validate_dnns(item, where)


def _validate_model(config: pipeline_pb2.PipelineConfig) -> None:
    model = config.model_config
    path = "model_config"
    entry = registry.lookup(model.model_class)
    require(entry is not None, f"{path}.model_class",
            f"{model.model_class!r} is not one of {', '.join(registry.model_names())}")
    require(not model.HasField("backbone") or entry.config_field == "model_params", f"{path}.backbone",
            f"a backbone is EasyRec's RankModel's (model_class {model.model_class!r} does not read it)")
    if entry.model_class.one_embedding_dim:
        dims = sorted({f.embedding_dim for f in config.feature_configs if is_id_feature(f)})
        require(len(dims) <= 1, "feature_configs",
                 f"{entry.model_class.__name__} needs one embedding_dim for all id features, got {dims}")
    chosen = model.WhichOneof("model")
    if chosen is not None:
        require(chosen == entry.config_field, f"{path}.{chosen}",
                 f"does not match model_class {model.model_class!r}")
        _validate_dnns(getattr(model, chosen), f"{path}.{chosen}")
    field = entry.config_field
    entry.model_class.validate_settings(config, f"{path}.{field}")  # the model's own rules (groups, towers...)
    if chosen in ("deepfm", "wide_and_deep"):
        sub = getattr(model, chosen)
        require(1 <= sub.wide_output_dim <= 1024, f"{path}.{chosen}.wide_output_dim",
                 f"must be in [1, 1024], got {sub.wide_output_dim}")
        if sub.HasField("final_dnn"):
            _validate_dnn(sub.final_dnn, f"{path}.{chosen}.final_dnn")
    # both raise ConfigError on an unsupported loss or a tower without a name or label
    if not entry.model_class.tasks_from_settings(getattr(model, field), config.data_config.label_fields, 1,
                                                 f"{path}.{field}"):
        single_task(model, config.data_config.label_fields, 1)
    _validate_loss_sessions(config)
    _validate_feature_groups(config)
    require(model.embedding_regularization >= 0, f"{path}.embedding_regularization", "must be >= 0")
    require(model.l2_regularization >= 0, f"{path}.l2_regularization", "must be >= 0")


def _validate_loss_sessions(config: pipeline_pb2.PipelineConfig) -> None:
    """A loss's session_name (pairwise, JRC: the samples' session ids) names a feature of one value per
    sample: the model reads the ids from the batch's features by name."""
    model = config.model_config
    single = {f.feature_name or f.input_names[0] for f in config.feature_configs
              if f.feature_type in (_FC.IdFeature, _FC.RawFeature)
              or (f.feature_type == _FC.ComboFeature and not any(f.combo_input_seps))}
    chosen = model.WhichOneof("model")
    owners = [("model_config", model)]
    owners += [(f"model_config.{chosen}.task_towers[{i}]", t) for i, t in enumerate(towers_in(getattr(model, chosen)))] \
        if chosen else []
    for where, owner in owners:
        for i, loss in enumerate(owner.losses):
            param = loss.WhichOneof("loss_param")
            session = getattr(getattr(loss, param), "session_name", "") if param else ""
            require(not session or session in single, f"{where}.losses[{i}].{param}.session_name",
                     f"{session!r} is not a feature of one value per sample (IdFeature or RawFeature of "
                     f"feature_configs: {sorted(single)})")


def _validate_feature_groups(config: pipeline_pb2.PipelineConfig) -> None:
    groups = config.model_config.feature_groups
    validate_sequence_groups(config)
    if not groups:
        return
    known = {f.feature_name or f.input_names[0] for f in config.feature_configs}
    grouped = {n for g in groups for s in g.sequence_features for m in s.seq_att_map
               for n in list(m.key) + list(m.hist_seq) + list(m.aux_hist_seq)}
    for i, group in enumerate(groups):
        path = f"model_config.feature_groups[{i}]"
        require(len(group.feature_names) > 0 or len(group.sequence_features) > 0, f"{path}.feature_names",
                 "at least one feature name (or sequence_features) is required")
        for j, name in enumerate(group.feature_names):
            require(name in known, f"{path}.feature_names[{j}]", f"{name!r} is not a feature of feature_configs")
            grouped.add(name)
    deep = {n for g in groups if g.wide_deep != pipeline_pb2.FeatureGroup.WIDE
            for n in list(g.feature_names) + [s.group_name or g.group_name for s in g.sequence_features]}
    require(bool(deep), "model_config.feature_groups", "no group feeds the deep part (wide_deep DEEP or WIDE_AND_DEEP)")
    unused = sorted(known - grouped)
    if unused:
        log.warning("features in no model_config.feature_groups are not used by the model: %s", ", ".join(unused))


def _validate_train(train: pipeline_pb2.TrainConfig) -> None:
    path = "train_config"
    for field in ("optimizer_config", "sparse_optimizer_config"):
        which = getattr(train, field).WhichOneof("optimizer")
        if which:
            opt = getattr(getattr(train, field), which)
            _validate_learning_rate(opt, f"{path}.{field}.{which}")
    require(train.keep_checkpoint_max >= 1, f"{path}.keep_checkpoint_max", "must be >= 1")
    require(train.log_step_count_secs > 0, f"{path}.log_step_count_secs", "must be > 0")
    require(train.stop_signal_poll_secs > 0, f"{path}.stop_signal_poll_secs", "must be > 0")
    require(train.metrics_window_samples > 0, f"{path}.metrics_window_samples", "must be > 0")
    require(train.shrink_every_secs >= 0, f"{path}.shrink_every_secs", "must be >= 0")
    require(-1 <= train.shrink_at_hour <= 23, f"{path}.shrink_at_hour", f"must be -1 (off) or 0-23, got {train.shrink_at_hour}")
    require(train.seconds_per_day > 0, f"{path}.seconds_per_day", "must be > 0")
    if train.dead_line:
        try:
            deadline = datetime.datetime.strptime(train.dead_line.strip(), "%Y%m%d %H:%M:%S")
        except ValueError:
            raise ConfigError(f"{path}.dead_line", f"{train.dead_line!r} is not 'YYYYMMDD HH:MM:SS'") from None
        if deadline < datetime.datetime.now():
            log.warning("%s.dead_line %s has passed: training stops after its first step", path, train.dead_line)
    if train.HasField("incr_save_config"):
        _validate_incr_save(train.incr_save_config, f"{path}.incr_save_config")
    if train.HasField("inference_save_config"):
        saves, where = train.inference_save_config, f"{path}.inference_save_config"
        require(-1 <= saves.base_save_at_hour <= 23, f"{where}.base_save_at_hour",
                 f"must be -1 (off) or 0-23, got {saves.base_save_at_hour}")
        require(saves.base_save_secs >= 0, f"{where}.base_save_secs", "must be >= 0")
        require(saves.delta_save_secs >= 0, f"{where}.delta_save_secs", "must be >= 0")
        require(saves.keep_bases >= 1, f"{where}.keep_bases", "must be >= 1")
        require(saves.part_bytes >= 4096, f"{where}.part_bytes", f"must be >= 4096, got {saves.part_bytes}")


def _validate_learning_rate(optimizer, path: str) -> None:
    if not optimizer.HasField("learning_rate_schedule"):
        require(optimizer.learning_rate > 0, f"{path}.learning_rate", f"must be > 0, got {optimizer.learning_rate}")
        return
    schedule = optimizer.learning_rate_schedule
    which = schedule.WhichOneof("schedule")
    where = f"{path}.learning_rate.{which}"
    require(which is not None, f"{path}.learning_rate",
            "needs constant_learning_rate or exponential_decay_learning_rate")
    if which == "constant_learning_rate":
        rate = schedule.constant_learning_rate.learning_rate
        require(rate > 0, f"{where}.learning_rate", f"must be > 0, got {rate}")
        return
    decay = schedule.exponential_decay_learning_rate
    require(decay.initial_learning_rate > 0, f"{where}.initial_learning_rate", "must be > 0")
    require(decay.decay_steps > 0, f"{where}.decay_steps", "must be > 0")
    require(0 < decay.decay_factor <= 1, f"{where}.decay_factor", f"must be in (0, 1], got {decay.decay_factor}")
    require(decay.min_learning_rate >= 0, f"{where}.min_learning_rate", "must be >= 0")


def _validate_servers(server: str, path: str) -> None:
    require(bool(server.strip()), path, "is required (host:port, comma-separated for several brokers)")
    for broker in server.split(","):
        host, _, port = broker.strip().rpartition(":")
        require(bool(host) and port.isdigit() and 0 < int(port) < 65536, path, f"{broker.strip()!r} is not host:port")


def _validate_incr_save(incr: pipeline_pb2.IncrSaveConfig, path: str) -> None:
    storage = incr.WhichOneof("storage")
    require(storage is not None, path, "needs kafka { server topic } or fs { incr_save_dir }")
    if storage == "kafka":
        _validate_servers(incr.kafka.server, f"{path}.kafka.server")
        require(bool(incr.kafka.topic), f"{path}.kafka.topic", "is required")
        require(incr.kafka.consumer.offset >= 0, f"{path}.kafka.consumer.offset", "must be >= 0")
        rf, isr = incr.kafka.replication_factor, incr.kafka.min_insync_replicas
        require(rf <= 32767, f"{path}.kafka.replication_factor", f"must be at most 32767, got {rf}")
        require(not (rf and isr > rf), f"{path}.kafka.min_insync_replicas",
                f"{isr} is more than replication_factor {rf}: no write could ever be acknowledged")
        for key in incr.kafka.config:
            require(key in KafkaProducer.DEFAULT_CONFIG, f"{path}.kafka.config[{key}]",
                     "is not a kafka-python producer setting")
    else:
        require(bool(incr.fs.incr_save_dir), f"{path}.fs.incr_save_dir", "is required")
        require(incr.fs.retention_secs >= 0, f"{path}.fs.retention_secs", "must be >= 0 (0: no bound)")
    for name in ("dense_save_secs", "sparse_save_secs", "sparse_save_secs_caught_up", "flush_timeout_secs",
                 "full_sync_secs"):
        require(getattr(incr, name) >= 0, f"{path}.{name}", "must be >= 0")
    require(incr.dense_save_steps or incr.dense_save_secs, path, "dense_save_steps and dense_save_secs are both 0")
    require(incr.sparse_save_steps or incr.sparse_save_secs, path, "sparse_save_steps and sparse_save_secs are both 0")
    require(incr.max_message_bytes >= 4096, f"{path}.max_message_bytes", f"must be >= 4096, got {incr.max_message_bytes}")
    require(incr.full_sync_send_bytes >= 1, f"{path}.full_sync_send_bytes",
            f"must be >= 1, got {incr.full_sync_send_bytes}")
    require(incr.max_pending_updates >= 1, f"{path}.max_pending_updates", "must be >= 1")


def validate_pipeline_config(config: pipeline_pb2.PipelineConfig, online: bool = False) -> None:
    """Raises ConfigError naming the first bad field; returns None when fine."""
    require(bool(config.model_dir), "model_dir", "is required")
    require(config.HasField("data_config"), "data_config", "is required")
    _validate_data(config.data_config)
    _validate_bad_input(config)
    _validate_features(config)
    require(config.HasField("model_config"), "model_config", "is required")
    _validate_model(config)
    _validate_train(config.train_config)
    for name in ("kafka_train_input", "kafka_eval_input"):
        if config.HasField(name):
            _validate_kafka(getattr(config, name), name)
    data = config.data_config
    if data.HasField("input_type"):
        wanted = "kafka_train_input" if data.input_type == pipeline_pb2.DataConfig.KafkaInput else "file_train_input"
        require(config.HasField(wanted), "data_config.input_type",
                 f"{pipeline_pb2.DataConfig.InputType.Name(data.input_type)} reads {wanted}, which the config lacks")
    if online:
        require(config.HasField("kafka_train_input"), "kafka_train_input", "is required for --online training")
    else:
        require(config.HasField("kafka_train_input") or len(config.file_train_input.paths) > 0,
                 "file_train_input.paths", "an offline run needs file_train_input or kafka_train_input")
