"""EasyRec ODL configs read as they are: its field names and shapes become this project's.

Most of EasyRec's fields have the same name and meaning here and need
nothing. The rest are of three kinds:

* a different shape for the same thing (``feature_config { features }``,
  ``learning_rate { exponential_decay_learning_rate {...} }``,
  ``config_global: "fetch.max.bytes=..."``, the older ``offset: [..]``):
  rewritten here to this project's form, so everything downstream sees one
  config;
* a setting that means nothing with dynamic tables or asynchronous training
  (``hash_bucket_size`` on an id feature, ``sync_replicas``,
  ``prefetch_size`` ...): accepted, and named in one warning;
* anything else stays a ConfigError naming the field (see validate.py).
"""
import logging
import os
import re
from typing import Dict, List, Tuple

from easyonline.core.errors import ConfigError
from easyonline.protos import pipeline_pb2

log = logging.getLogger(__name__)


def _message_field(name: str) -> "re.Pattern[str]":
    """Matches strings, comments, and ``name`` opening a message (``name {`` or ``name: {``); a match equal
    to ``name`` is the field, the others are skipped."""
    return re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|#[^\n]*|\b' + name + r'(?=\s*:?\s*[{<])')


# EasyRec's LearningRate message, read as ``learning_rate_schedule``; its repeated optimizer_config.
_LEARNING_RATE_MESSAGE = _message_field("learning_rate")
_OPTIMIZER_MESSAGE = _message_field("optimizer_config")
# MultiTowerDIN's and MultiTowerBST's settings (EasyRec's multi_tower message) and their
# model_config.seq_att_groups; the model_class names the settings field.
_MULTI_TOWER_MESSAGE = _message_field("multi_tower")
_SEQ_ATT_GROUPS_MESSAGE = _message_field("seq_att_groups")
_SEQUENCE_TOWERS = re.compile(r'model_class\s*:\s*["\'](MultiTowerDIN|multi_tower_din|MultiTowerBST|multi_tower_bst)["\']')
_SKIPPED = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|#[^\n]*|[{}<>]')

# EasyRec's metrics the eval job computes (it always reports AUC, log loss and CTR).
EVAL_METRICS = ("auc", "gauc", "session_auc")

# librdkafka's names (EasyRec's config_global / config_topic) -> kafka-python consumer settings.
LIBRDKAFKA_TO_KAFKA_PYTHON: Dict[str, str] = {
    "client.id": "client_id",
    "fetch.max.bytes": "fetch_max_bytes",
    "fetch.min.bytes": "fetch_min_bytes",
    "fetch.wait.max.ms": "fetch_max_wait_ms",
    "max.partition.fetch.bytes": "max_partition_fetch_bytes",
    "fetch.message.max.bytes": "max_partition_fetch_bytes",
    "session.timeout.ms": "session_timeout_ms",
    "heartbeat.interval.ms": "heartbeat_interval_ms",
    "max.poll.interval.ms": "max_poll_interval_ms",
    "request.timeout.ms": "request_timeout_ms",
    "socket.timeout.ms": "request_timeout_ms",
    "reconnect.backoff.ms": "reconnect_backoff_ms",
    "reconnect.backoff.max.ms": "reconnect_backoff_max_ms",
    "retry.backoff.ms": "retry_backoff_ms",
    "metadata.max.age.ms": "metadata_max_age_ms",
    "topic.metadata.refresh.interval.ms": "metadata_max_age_ms",
    "connections.max.idle.ms": "connections_max_idle_ms",
    "socket.receive.buffer.bytes": "receive_buffer_bytes",
    "socket.send.buffer.bytes": "send_buffer_bytes",
    "check.crcs": "check_crcs",
    "isolation.level": "isolation_level",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "ssl.crl.location": "ssl_crlfile",
}
# Accepted and ignored: positions come from checkpoints, buffering from the reader's own bounds.
LIBRDKAFKA_IGNORED: Dict[str, str] = {
    "enable.auto.commit": "positions are committed after each checkpoint",
    "enable.auto.offset.store": "positions are committed after each checkpoint",
    "auto.commit.interval.ms": "positions are committed after each checkpoint",
    "auto.offset.reset": "the start is offset_info / offset_time, else the earliest sample",
    "queued.min.messages": "the reader process bounds what it reads ahead",
    "queued.max.messages.kbytes": "the reader process bounds what it reads ahead",
    "api.version.request": "kafka-python negotiates the API version",
    "broker.version.fallback": "kafka-python negotiates the API version",
}


def read_easyrec_text(text: str) -> str:
    """Config text with EasyRec's forms that protobuf text format cannot take as they are, renamed.

    ``learning_rate { ... }`` messages become ``learning_rate_schedule``;
    MultiTowerDIN's and MultiTowerBST's ``multi_tower`` and ``seq_att_groups``
    their own forms (``_sequence_towers``). Two
    ``optimizer_config`` in a row (EasyRec: the first trains the embeddings,
    the second the rest) become ``sparse_optimizer_config`` and
    ``optimizer_config``; more than two are an error.
    """
    text = _LEARNING_RATE_MESSAGE.sub(
        lambda m: "learning_rate_schedule" if m.group(0) == "learning_rate" else m.group(0), text)
    text = _sequence_towers(text)
    optimizers = [m for m in _OPTIMIZER_MESSAGE.finditer(text) if m.group(0) == "optimizer_config"]
    if len(optimizers) > 2:
        raise ConfigError("train_config.optimizer_config", f"{len(optimizers)} optimizers: give one, or two (EasyRec's "
                          "order: the embedding tables', then the rest's)")
    if len(optimizers) == 2:
        first = optimizers[0]
        text = text[:first.start()] + "sparse_optimizer_config" + text[first.end():]
        if re.search(r'model_class\s*:\s*"(WideAndDeep|wide_and_deep)"', text):
            log.warning("train_config: of two optimizers, the first trains every embedding table here, the deep "
                        "part's too (EasyRec's wide & deep gives the deep embeddings to the second)")
    return text


def _message_end(text: str, start: int) -> int:
    """The index just past the message whose name starts at ``start`` (its matching close brace)."""
    depth = 0
    for token in _SKIPPED.finditer(text, start):
        if token.group(0) in ("{", "<"):
            depth += 1
        elif token.group(0) in ("}", ">"):
            depth -= 1
            if depth == 0:
                return token.end()
    raise ConfigError("model_config.seq_att_groups", "the message is not closed")


def _sequence_towers(text: str) -> str:
    """EasyRec's MultiTowerDIN and MultiTowerBST: their ``multi_tower`` settings read as ``multi_tower_din`` or
    ``multi_tower_bst``, and each ``model_config.seq_att_groups { ... }`` as a feature group holding it
    (``feature_groups { sequence_features { ... } }``, named after it by ``normalize``)."""
    found_class = _SEQUENCE_TOWERS.search(text)
    if not found_class:
        return text
    field = "multi_tower_bst" if found_class.group(1) in ("MultiTowerBST", "multi_tower_bst") else "multi_tower_din"
    text = _MULTI_TOWER_MESSAGE.sub(lambda m: field if m.group(0) == "multi_tower" else m.group(0), text)
    while True:
        found = next((m for m in _SEQ_ATT_GROUPS_MESSAGE.finditer(text) if m.group(0) == "seq_att_groups"), None)
        if found is None:
            return text
        end = _message_end(text, found.end())
        body = text[found.end():end].lstrip().lstrip(":")
        text = text[:found.start()] + "feature_groups { sequence_features " + body + " }" + text[end:]


def librdkafka_settings(entries: List[str], path: str) -> Tuple[Dict[str, str], List[str]]:
    """``name=value`` strings as (kafka-python settings, names ignored); an unknown name is a ConfigError."""
    settings: Dict[str, str] = {}
    ignored = []
    for i, entry in enumerate(entries):
        name, sep, value = entry.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name:
            raise ConfigError(f"{path}[{i}]", f"expected name=value (librdkafka style), got {entry!r}")
        if name in LIBRDKAFKA_IGNORED:
            ignored.append(f"{name} ({LIBRDKAFKA_IGNORED[name]})")
        elif name in LIBRDKAFKA_TO_KAFKA_PYTHON:
            settings[LIBRDKAFKA_TO_KAFKA_PYTHON[name]] = value
        else:
            known = ", ".join(sorted(LIBRDKAFKA_TO_KAFKA_PYTHON))
            raise ConfigError(f"{path}[{i}]", f"{name!r} has no kafka-python equivalent here (known: {known})")
    return settings, ignored


def _kafka_input(kafka: pipeline_pb2.KafkaInput, path: str, ignored: List[str]) -> None:
    # librdkafka (EasyRec's client) takes a broker without a port as port 9092
    kafka.server = ",".join(b.strip() if ":" in b or not b.strip() else b.strip() + ":9092"
                            for b in kafka.server.split(","))
    if kafka.offset:
        if kafka.offset_info or kafka.offset_time:
            raise ConfigError(f"{path}.offset", "give offset (EasyRec's older form) or offset_info / offset_time, "
                                                "not both")
        partitions = kafka.partitions or len(kafka.offset)
        if len(kafka.offset) not in (1, partitions):
            raise ConfigError(f"{path}.offset", f"{len(kafka.offset)} offsets for {partitions} partitions")
        offsets = list(kafka.offset) * partitions if len(kafka.offset) == 1 else list(kafka.offset)
        kafka.offset_info = "{" + ", ".join(f'"{p}": {o}' for p, o in enumerate(offsets)) + "}"
        kafka.ClearField("offset")
    kafka.ClearField("partitions")
    for field in ("config_global", "config_topic"):
        settings, skipped = librdkafka_settings(list(getattr(kafka, field)), f"{path}.{field}")
        for key, value in settings.items():
            if key in kafka.config and kafka.config[key] != value:
                raise ConfigError(f"{path}.{field}", f"sets {key} to {value!r}, config[{key}] to {kafka.config[key]!r}")
            kafka.config[key] = value
        ignored.extend(f"{path}.{field} {name}" for name in skipped)
        kafka.ClearField(field)


def _incr_save_dir(config: pipeline_pb2.PipelineConfig) -> None:
    if not config.train_config.HasField("incr_save_config"):
        return
    incr = config.train_config.incr_save_config
    if incr.WhichOneof("storage") != "fs" or not incr.fs.relative:
        return
    directory = incr.fs.incr_save_dir
    if config.model_dir and "://" not in directory and not os.path.isabs(directory):
        incr.fs.incr_save_dir = config.model_dir.rstrip("/") + "/" + directory
    incr.fs.relative = False


def _optimizer(optimizer: pipeline_pb2.OptimizerConfig) -> None:
    """EasyRec's optimizers that are this project's under another name, renamed; FTRL's EasyRec field names."""
    which = optimizer.WhichOneof("optimizer")
    if which in ("lazy_adam_optimizer", "adam_async_optimizer"):
        adam = pipeline_pb2.AdamOptimizer()
        adam.CopyFrom(getattr(optimizer, which))
        optimizer.adam_optimizer.CopyFrom(adam)
    elif which == "momentum_optimizer":
        momentum = optimizer.momentum_optimizer
        sgd = pipeline_pb2.SgdOptimizer(momentum=momentum.momentum_optimizer_value)
        if momentum.HasField("learning_rate"):
            sgd.learning_rate = momentum.learning_rate
        if momentum.HasField("learning_rate_schedule"):
            sgd.learning_rate_schedule.CopyFrom(momentum.learning_rate_schedule)
        optimizer.sgd_optimizer.CopyFrom(sgd)
    elif which == "ftrl_optimizer":
        ftrl = optimizer.ftrl_optimizer
        for easyrec, ours in (("l1_reg", "l1_regularization_strength"), ("l2_reg", "l2_regularization_strength"),
                              ("l2_shrinkage_reg", "l2_shrinkage_regularization_strength")):
            if ftrl.HasField(easyrec):
                setattr(ftrl, ours, getattr(ftrl, easyrec))
                ftrl.ClearField(easyrec)


def _train_config(train: pipeline_pb2.TrainConfig, ignored: List[str]) -> None:
    for field, why in (("log_step_count_steps", "status lines come every log_step_count_secs"),
                       ("sync_replicas", "cluster training is asynchronous")):
        if train.HasField(field):
            if getattr(train, field):
                ignored.append(f"train_config.{field} ({why})")
            train.ClearField(field)
    for part in ("optimizer_config", "sparse_optimizer_config"):
        if train.HasField(part):
            _optimizer(getattr(train, part))
        if train.HasField(part) and getattr(train, part).HasField("use_moving_average"):
            if getattr(train, part).use_moving_average:
                ignored.append(f"train_config.{part}.use_moving_average (not supported: the raw weights are used)")
            getattr(train, part).ClearField("use_moving_average")
    if not train.HasField("incr_save_config"):
        return
    incr = train.incr_save_config
    if incr.HasField("fs") and incr.fs.HasField("mount_path"):
        ignored.append("incr_save_config.fs.mount_path (for EasyRec's online service)")
        incr.fs.ClearField("mount_path")
    if incr.HasField("debug_save_update"):
        if incr.debug_save_update:
            ignored.append("incr_save_config.debug_save_update (read a topic with easyonline.tools.read_updates)")
        incr.ClearField("debug_save_update")


# EasyRec's range name (config_util.auto_expand_names): "field[1-3]" is field1, field2, field3.
_RANGE_NAME = re.compile(r"([a-zA-Z_]+)\[([0-9]+)-([0-9]+)\]")


def expand_range(name: str, path: str) -> List[str]:
    """The names a range name stands for ("field[1-3]": field1, field2, field3); any other name is itself."""
    match = _RANGE_NAME.fullmatch(name)
    if match is None:
        return [name]
    prefix, first, last = match.group(1), int(match.group(2)), int(match.group(3))
    if last < first:
        raise ConfigError(path, f"{name!r}: the range ends before it starts")
    return [f"{prefix}{i}" for i in range(first, last + 1)]


def _expand_input_fields(data: pipeline_pb2.DataConfig) -> None:
    """EasyRec's auto_expand_input_fields: each range-named field becomes its fields, of its type and default."""
    fields = list(data.input_fields)
    del data.input_fields[:]
    for i, field in enumerate(fields):
        for name in expand_range(field.input_name, f"data_config.input_fields[{i}].input_name"):
            data.input_fields.add().CopyFrom(field)
            data.input_fields[-1].input_name = name
    data.ClearField("auto_expand_input_fields")


def _expand_group_names(model: pipeline_pb2.ModelConfig) -> None:
    """EasyRec expands range names in feature groups always (FeatureGroup._auto_expand_feature_name)."""
    for i, group in enumerate(model.feature_groups):
        names = [expanded for j, name in enumerate(group.feature_names)
                 for expanded in expand_range(name, f"model_config.feature_groups[{i}].feature_names[{j}]")]
        if names != list(group.feature_names):
            del group.feature_names[:]
            group.feature_names.extend(names)


def _feature_name(feature: pipeline_pb2.FeatureConfig) -> str:
    return feature.feature_name or (feature.input_names[0] if feature.input_names else "?")


def _numeric_sequence_buckets(feature: pipeline_pb2.FeatureConfig) -> None:
    """EasyRec's sequence of numbers (``sub_feature_type: RawFeature``) with ``num_buckets`` > 1 and no
    boundaries, read as EasyRec's input and feature columns read it: with ``max_val > min_val`` each value is
    scaled to (x - min_val) / (max_val - min_val) and bucketized at i / num_buckets for i < num_buckets, which
    are the boundaries min_val + i * (max_val - min_val) / num_buckets of the value itself; without, each
    value is an integer id (an identity column: here a row per value, as any id sequence)."""
    if (feature.feature_type != pipeline_pb2.FeatureConfig.SequenceFeature
            or feature.sub_feature_type != pipeline_pb2.FeatureConfig.RawFeature or feature.boundaries
            or feature.num_buckets <= 1):
        return
    if feature.max_val > feature.min_val:
        low, span, count = feature.min_val, feature.max_val - feature.min_val, feature.num_buckets
        feature.boundaries.extend(low + span * i / count for i in range(count))
    else:
        feature.sub_feature_type = pipeline_pb2.FeatureConfig.IdFeature
    feature.ClearField("min_val")
    feature.ClearField("max_val")


def _model_config(model: pipeline_pb2.ModelConfig, ignored: List[str]) -> None:
    which = model.WhichOneof("model")
    if which in ("deepfm", "wide_and_deep") and getattr(model, which).HasField("l2_regularization"):
        if not model.l2_regularization:
            model.l2_regularization = getattr(model, which).l2_regularization
        getattr(model, which).ClearField("l2_regularization")
    if which == "deepfm":
        for field in ("wide_regularization", "dense_regularization"):
            if model.deepfm.HasField(field):
                ignored.append(f"model_config.deepfm.{field} (deprecated and unused in EasyRec too)")
                model.deepfm.ClearField(field)
    for group in model.feature_groups:  # (EasyRec's seq_att_groups, read as a group holding one)
        if not group.group_name and not group.feature_names and len(group.sequence_features) == 1:
            group.group_name = group.sequence_features[0].group_name
    if model.HasField("variational_dropout"):
        ignored.append("model_config.variational_dropout (not supported: the model trains without it)")
        model.ClearField("variational_dropout")


def _eval_config(evaluation: pipeline_pb2.EvalConfig, ignored: List[str]) -> None:
    if evaluation.HasField("eval_interval_secs"):
        ignored.append("eval_config.eval_interval_secs (the eval job follows new checkpoints: --poll_secs)")
        evaluation.ClearField("eval_interval_secs")
    if evaluation.HasField("eval_online"):
        if evaluation.eval_online:
            ignored.append("eval_config.eval_online (the status line carries the trainer's prequential AUC; "
                           "python -m easyonline.eval scores a held-out stream)")
        evaluation.ClearField("eval_online")
    kept = [m for m in evaluation.metrics_set if m.WhichOneof("metric") in EVAL_METRICS]
    dropped = sorted({m.WhichOneof("metric") for m in evaluation.metrics_set} - set(EVAL_METRICS) - {None})
    if dropped:
        ignored.append(f"eval_config.metrics_set {', '.join(dropped)} (the eval job reports "
                       f"{', '.join(EVAL_METRICS)}, log loss and CTR)")
        del evaluation.metrics_set[:]
        evaluation.metrics_set.extend(kept)


def normalize(config: pipeline_pb2.PipelineConfig) -> List[str]:
    """Rewrites EasyRec's forms in place; logs one warning naming every setting accepted and ignored.

    Returns those settings (the converter prints them). Idempotent: a normalized config is unchanged.
    """
    ignored: List[str] = []
    if config.HasField("feature_config"):
        config.feature_configs.extend(config.feature_config.features)
        config.ClearField("feature_config")
    for name in ("kafka_train_input", "kafka_eval_input"):
        if config.HasField(name):
            _kafka_input(getattr(config, name), name, ignored)
    if config.HasField("model_config"):
        _model_config(config.model_config, ignored)
        _expand_group_names(config.model_config)
    if config.data_config.auto_expand_input_fields:
        _expand_input_fields(config.data_config)
    for feature in config.feature_configs:
        name = _feature_name(feature)
        _numeric_sequence_buckets(feature)
        if feature.HasField("combo_join_sep"):
            ignored.append(f"combo_join_sep of {name} (the combination is hashed as a whole)")
            feature.ClearField("combo_join_sep")
        if feature.vocab_list:
            ignored.append(f"vocab_list of {name} (a dynamic table takes any value)")
            feature.ClearField("vocab_list")
    unbucketed = [_feature_name(f) for f in config.feature_configs
                  if f.feature_type != pipeline_pb2.FeatureConfig.ComboFeature and (f.hash_bucket_size or f.num_buckets)]
    if unbucketed:
        ignored.append(f"hash_bucket_size / num_buckets of {', '.join(unbucketed)} (dynamic tables take any id)")
        for feature in config.feature_configs:
            if feature.feature_type != pipeline_pb2.FeatureConfig.ComboFeature:
                feature.ClearField("hash_bucket_size")
            feature.ClearField("num_buckets")
    if config.HasField("train_config"):
        _train_config(config.train_config, ignored)
    if config.HasField("data_config"):
        for field, why in (("prefetch_size", "the reader process reads ahead, bounded in bytes"),
                           ("chief_redundant", "each trainer of a cluster reads its own partitions"),
                           ("num_epochs", "a stream has no epochs"),
                           ("n_data_batch_tfrecord", "TFRecord input only"),
                           ("file_shard", "each trainer of a cluster reads its own partitions, or its own files")):
            if config.data_config.HasField(field):
                if getattr(config.data_config, field):
                    ignored.append(f"data_config.{field} ({why})")
                config.data_config.ClearField(field)
    if config.HasField("export_config"):
        ignored.append("export_config (the export takes one input per field, with serving and update signatures)")
        config.ClearField("export_config")
    if config.HasField("eval_config"):
        _eval_config(config.eval_config, ignored)
    _incr_save_dir(config)
    if ignored:
        log.warning("EasyRec settings accepted and ignored: %s", "; ".join(ignored))
    return ignored
