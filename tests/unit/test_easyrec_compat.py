"""EasyRec's config forms: each is read as this project's, or named in one warning, or refused naming the field."""
import datetime
import logging
import subprocess
import time

import numpy as np
import pytest

from easyonline.config import ConfigError, load_pipeline_config, parse_pipeline_config
from easyonline.config.easyrec_compat import normalize, read_easyrec_text
from easyonline.config.validate import validate_pipeline_config
from easyonline.features.feature_spec import build_feature_specs
from easyonline.models.builder import build_model
from easyonline.protos import pipeline_pb2
from easyonline.train.optimizers import ExponentialDecayWithFloor, build_optimizer
from easyonline.train.schedule_callbacks import StopAtDeadLine
from tests.conftest import PYTHON, ROOT, python_env
from tests.integration.test_easyrec_configs import VARIANTS, easyrec_config

BASE = """model_dir: "/tmp/m"
kafka_train_input { server: "127.0.0.1:9092" topic: "t" }
data_config { input_fields { input_name: "label" input_type: INT32 } input_fields { input_name: "u" }
              input_fields { input_name: "i" } input_fields { input_name: "x" input_type: FLOAT } label_fields: "label" }
feature_configs { input_names: "u" embedding_dim: 4 }
feature_configs { input_names: "i" embedding_dim: 4 }
feature_configs { input_names: "x" feature_type: RawFeature }
"""


def _load(tmp_path, text: str, edits: str = ""):
    path = tmp_path / "c.config"
    path.write_text(text)
    return load_pipeline_config(str(path), edits)


def test_learning_rate_messages_are_read_as_schedules_and_numbers_stay_numbers(tmp_path):
    text = BASE + """train_config {
  # learning_rate { in a comment } stays
  optimizer_config: { adam_optimizer: { learning_rate: { exponential_decay_learning_rate {
      initial_learning_rate: 0.01 decay_steps: 10 decay_factor: 0.5 min_learning_rate: 0.002 } } } }
  sparse_optimizer_config { adagrad_optimizer { learning_rate { constant_learning_rate { learning_rate: 0.3 } } } }
}
model_config { model_class: "deepfm" }
"""
    assert "# learning_rate { in a comment } stays" in read_easyrec_text(text)
    config = _load(tmp_path, text)
    validate_pipeline_config(config, online=True)
    decay = config.train_config.optimizer_config.adam_optimizer.learning_rate_schedule.exponential_decay_learning_rate
    assert (decay.initial_learning_rate, decay.decay_steps, decay.staircase) == (pytest.approx(0.01), 10, True)
    schedule = build_optimizer(config.train_config.optimizer_config)._get_hyper("learning_rate")
    assert isinstance(schedule, ExponentialDecayWithFloor)
    rates = [float(schedule(step)) for step in (0, 9, 10, 25, 1000)]
    assert rates == pytest.approx([0.01, 0.01, 0.005, 0.0025, 0.002])  # staircase, then the floor
    sparse = build_optimizer(config.train_config.sparse_optimizer_config)
    assert float(sparse._get_hyper("learning_rate")) == pytest.approx(0.3)
    numbers = _load(tmp_path, BASE + 'train_config { optimizer_config { adam_optimizer { learning_rate: 0.02 } } }\n'
                    'model_config { model_class: "dnn" }\n')
    assert not numbers.train_config.optimizer_config.adam_optimizer.HasField("learning_rate_schedule")


def test_a_bad_schedule_names_its_field(tmp_path):
    config = _load(tmp_path, BASE + """train_config { optimizer_config { adam_optimizer { learning_rate {
        exponential_decay_learning_rate { decay_steps: 0 } } } } }
model_config { model_class: "dnn" }""")
    with pytest.raises(ConfigError) as e:
        validate_pipeline_config(config)
    assert e.value.path == "train_config.optimizer_config.adam_optimizer.learning_rate.exponential_decay_learning_rate.decay_steps"


def test_librdkafka_settings_become_kafka_python_settings_and_an_unknown_one_is_refused(tmp_path, caplog):
    text = BASE.replace('topic: "t" }', 'topic: "t" config_global: "fetch.max.bytes=1048576" '
                        'config_global: "enable.auto.commit=true" config_topic: "max.partition.fetch.bytes=65536" }')
    with caplog.at_level(logging.WARNING):
        config = _load(tmp_path, text + 'model_config { model_class: "dnn" }')
    validate_pipeline_config(config, online=True)
    assert dict(config.kafka_train_input.config) == {"fetch_max_bytes": "1048576", "max_partition_fetch_bytes": "65536"}
    assert not config.kafka_train_input.config_global and not config.kafka_train_input.config_topic
    assert "enable.auto.commit" in caplog.text
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, text.replace("fetch.max.bytes", "fetch.max.megabytes") + 'model_config { model_class: "dnn" }')
    assert e.value.path == "kafka_train_input.config_global[0]" and "fetch.max.megabytes" in str(e.value)


def test_older_offsets_and_a_broker_without_port(tmp_path):
    text = BASE.replace('server: "127.0.0.1:9092" topic: "t" }', 'server: "127.0.0.1" topic: "t" partitions: 2 offset: [5, 8] }')
    config = _load(tmp_path, text + 'model_config { model_class: "dnn" }')
    validate_pipeline_config(config, online=True)
    assert config.kafka_train_input.offset_info == '{"0": 5, "1": 8}'
    assert config.kafka_train_input.server == "127.0.0.1:9092"
    with pytest.raises(ConfigError, match="not both"):
        _load(tmp_path, text.replace("offset: [5, 8]", 'offset: [5, 8] offset_time: "1650765731"'))
    with pytest.raises(ConfigError, match="3 offsets for 2 partitions"):
        _load(tmp_path, text.replace("offset: [5, 8]", "offset: [5, 8, 9]"))


def test_the_five_sample_shapes_load_with_one_warning_and_normalizing_again_changes_nothing(tmp_path, caplog):
    for name, (sections, _) in VARIANTS.items():
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            config = _load(tmp_path, easyrec_config(sections, wrapped_features=name != "older_offsets"))
        validate_pipeline_config(config, online=True)
        assert len([r for r in caplog.records if "accepted and ignored" in r.getMessage()]) == 1, name
        assert len(config.feature_configs) == 23 and not config.HasField("feature_config")
        assert config.model_config.l2_regularization == pytest.approx(1e-5)
        assert config.eval_config.num_examples == 10240
        before = config.SerializeToString(deterministic=True)
        assert normalize(config) == [] and config.SerializeToString(deterministic=True) == before


def test_feature_groups_choose_the_wide_and_deep_features_and_final_dnn_gives_the_logit(tmp_path):
    groups = """model_config { model_class: "DeepFM"
  feature_groups { group_name: "deep" feature_names: ["u", "i"] wide_deep: DEEP }
  feature_groups { group_name: "wide" feature_names: ["u", "x"] wide_deep: WIDE }
  deepfm { dnn { hidden_units: [8] } final_dnn { hidden_units: [4] } wide_output_dim: 3 } }"""
    config = _load(tmp_path, BASE + groups)
    validate_pipeline_config(config, online=True)
    model = build_model(config, build_feature_specs(config))
    features = {"u": np.array([1, 2], np.int64), "i": np.array([3, 4], np.int64), "x": np.array([1.0, 2.0], np.float32)}
    from easyonline.core.bootstrap import ensure_legacy_keras  # pylint: disable=g-import-not-at-top
    tf = ensure_legacy_keras()
    tensors = {k: tf.constant(v) for k, v in features.items()}
    embeddings, first_order, _ = model.embed(tensors)
    assert len(embeddings) == 2                       # u and i feed the deep part
    assert first_order.shape.as_list() == [2, 1, 3]  # only u has wide weights, 3 wide
    logits, = model(tensors).values()
    assert logits.shape.as_list() == [2]
    assert any("final_dnn" in v.name for v in model.trainable_variables)
    with pytest.raises(ConfigError) as e:
        validate_pipeline_config(_load(tmp_path, BASE + groups.replace('["u", "x"]', '["u", "y"]')))
    assert e.value.path == "model_config.feature_groups[1].feature_names[1]"


def test_two_optimizers_are_the_embedding_tables_then_the_rest_and_three_are_refused(tmp_path):
    adagrad = "optimizer_config { adagrad_optimizer { learning_rate { constant_learning_rate { learning_rate: 0.05 } } } }"
    adam = "optimizer_config: { adam_optimizer: { learning_rate: 0.0001 } }"
    model = 'model_config { model_class: "DeepFM" }\n'
    config = _load(tmp_path, BASE + f"train_config {{\n  # optimizer_config {{ in a comment }}\n  {adagrad}\n  {adam}\n}}\n"
                   + model)
    validate_pipeline_config(config, online=True)
    train = config.train_config
    assert train.sparse_optimizer_config.WhichOneof("optimizer") == "adagrad_optimizer"
    assert train.optimizer_config.adam_optimizer.learning_rate == pytest.approx(0.0001)
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, BASE + f"train_config {{ {adagrad} {adam} {adam} }}\n" + model)
    assert e.value.path == "train_config.optimizer_config" and "3 optimizers" in str(e.value)


def test_easyrec_optimizer_names_are_read_as_the_same_optimizers(tmp_path):
    def optimizer(body: str):
        config = _load(tmp_path, BASE + f"train_config {{ optimizer_config {{ {body} }} }}\n"
                       'model_config { model_class: "DNN" }\n')
        validate_pipeline_config(config, online=True)
        return config.train_config.optimizer_config

    momentum = optimizer("momentum_optimizer { learning_rate { constant_learning_rate { learning_rate: 0.1 } } "
                         "momentum_optimizer_value: 0.8 }")
    assert momentum.WhichOneof("optimizer") == "sgd_optimizer"
    assert momentum.sgd_optimizer.momentum == pytest.approx(0.8)
    built = build_optimizer(momentum)
    assert float(built._get_hyper("learning_rate")) == pytest.approx(0.1)
    assert float(built._get_hyper("momentum")) == pytest.approx(0.8)
    for name in ("lazy_adam_optimizer", "adam_async_optimizer"):
        adam = optimizer(f"{name} {{ learning_rate {{ constant_learning_rate {{ learning_rate: 0.003 }} }} beta1: 0.8 }}")
        assert adam.WhichOneof("optimizer") == "adam_optimizer" and adam.adam_optimizer.beta1 == pytest.approx(0.8)
    ftrl = optimizer("ftrl_optimizer { l1_reg: 10 l2_reg: 0.5 l2_shrinkage_reg: 0.1 learning_rate: 0.2 }").ftrl_optimizer
    assert (ftrl.l1_regularization_strength, ftrl.l2_regularization_strength,
            ftrl.l2_shrinkage_regularization_strength) == pytest.approx((10, 0.5, 0.1))
    assert not (ftrl.HasField("l1_reg") or ftrl.HasField("l2_reg") or ftrl.HasField("l2_shrinkage_reg"))
    rms = build_optimizer(optimizer("rms_prop_optimizer { learning_rate: 0.01 decay: 0.8 momentum_optimizer_value: 0.5 "
                                    "epsilon: 0.1 }"))
    assert [float(rms._get_hyper(k)) for k in ("learning_rate", "rho", "momentum")] == pytest.approx([0.01, 0.8, 0.5])
    with pytest.raises(ConfigError) as e:
        optimizer("adamw_optimizer { weight_decay: 1e-5 }")
    assert e.value.path == "train_config.optimizer_config.adamw_optimizer"


def test_other_samples_settings_are_accepted_in_one_warning_and_other_losses_are_refused(tmp_path, caplog):
    text = BASE.replace('input_type: FLOAT }', 'input_type: FLOAT } num_epochs: 10 n_data_batch_tfrecord: 4') \
        .replace('feature_configs { input_names: "u" embedding_dim: 4 }',
                 'feature_configs { input_names: "u" embedding_dim: 4 vocab_list: ["a", "b"] }\n'
                 'feature_configs { input_names: ["u", "i"] feature_name: "ui" feature_type: ComboFeature '
                 'embedding_dim: 4 combo_join_sep: "X" }') + """
eval_config { metrics_set { auc {} } metrics_set { gauc { uid_field: "u" } } metrics_set { accuracy {} }
              eval_online: true }
model_config { model_class: "DeepFM" deepfm { wide_regularization: 1e-4 dense_regularization: 1e-4 }
               variational_dropout { regularization_lambda: 0.01 } loss_type: CLASSIFICATION num_class: 1 }
"""
    with caplog.at_level(logging.WARNING):
        config = _load(tmp_path, text)
    validate_pipeline_config(config, online=True)
    warnings = [r.getMessage() for r in caplog.records if "accepted and ignored" in r.getMessage()]
    assert len(warnings) == 1
    for setting in ("data_config.num_epochs", "n_data_batch_tfrecord", "eval_config.eval_online",
                    "metrics_set accuracy (", "vocab_list of u", "combo_join_sep of ui",
                    "variational_dropout", "deepfm.wide_regularization", "deepfm.dense_regularization"):
        assert warnings[0].count(setting) == 1, (setting, warnings[0])
    assert [m.WhichOneof("metric") for m in config.eval_config.metrics_set] == ["auc", "gauc"]
    before = config.SerializeToString(deterministic=True)
    assert normalize(config) == [] and config.SerializeToString(deterministic=True) == before
    for field, value, message in (("loss_type", "PAIR_WISE_LOSS", "PAIR_WISE_LOSS is not supported"), ("num_class", "2", "only 1")):
        with pytest.raises(ConfigError) as e:
            validate_pipeline_config(_load(tmp_path, BASE + f'model_config {{ model_class: "DeepFM" {field}: {value} }}'))
        assert e.value.path == f"model_config.{field}" and message in str(e.value)


def test_wide_and_deep_final_dnn_and_scaled_raw_features(tmp_path):
    text = BASE.replace('feature_type: RawFeature }', 'feature_type: RawFeature min_val: 2 max_val: 10 }') + """
model_config { model_class: "WideAndDeep" wide_and_deep { dnn { hidden_units: [8] } final_dnn { hidden_units: [4] }
               wide_output_dim: 3 l2_regularization: 0.001 } }"""
    config = _load(tmp_path, text)
    validate_pipeline_config(config, online=True)
    assert config.model_config.l2_regularization == pytest.approx(0.001)
    model = build_model(config, build_feature_specs(config))
    from easyonline.core.bootstrap import ensure_legacy_keras  # pylint: disable=g-import-not-at-top
    tf = ensure_legacy_keras()
    tensors = {"u": tf.constant([1, 2], tf.int64), "i": tf.constant([3, 4], tf.int64),
               "x": tf.constant([2.0, 6.0], tf.float32)}
    _, first_order, dense = model.embed(tensors)
    assert first_order.shape.as_list() == [2, 2, 3]  # u and i, 3 wide each
    assert dense.numpy()[:, 0] == pytest.approx([0.0, 0.5])  # (x - 2) / (10 - 2)
    logits, = model(tensors).values()
    assert logits.shape.as_list() == [2] and any("final_dnn" in v.name for v in model.trainable_variables)
    with pytest.raises(ConfigError) as e:
        validate_pipeline_config(_load(tmp_path, text.replace('input_names: "u" embedding_dim: 4',
                                                              'input_names: "u" embedding_dim: 4 max_val: 3')))
    assert e.value.path == "feature_configs[0].max_val"
    plain = _load(tmp_path, BASE + 'model_config { model_class: "WideAndDeep" wide_and_deep { wide_output_dim: 3 } }')
    assert build_model(plain, build_feature_specs(plain)).wide_dim == 1  # as EasyRec: one wide logit without final_dnn


def test_dead_line_stops_the_trainer_and_a_bad_one_is_refused(tmp_path):
    # whole seconds: 2 s ahead is at least 1 s away however far into the current second the clock is
    soon = (datetime.datetime.now() + datetime.timedelta(seconds=2)).strftime("%Y%m%d %H:%M:%S")

    class Trainer:
        reason = None

        def stop(self, reason):
            self.reason = reason

    trainer, deadline = Trainer(), StopAtDeadLine(soon)
    deadline.on_tick(trainer)
    assert trainer.reason is None
    time.sleep(max(0.0, datetime.datetime.strptime(soon, "%Y%m%d %H:%M:%S").timestamp() - time.time()) + 0.1)
    deadline.on_tick(trainer)
    assert trainer.reason == f"reached dead_line {soon}"
    config = _load(tmp_path, BASE + 'model_config { model_class: "dnn" } train_config { dead_line: "2022-05-16" }')
    with pytest.raises(ConfigError) as e:
        validate_pipeline_config(config)
    assert e.value.path == "train_config.dead_line"


def test_input_types_and_the_incr_save_dir_under_model_dir(tmp_path):
    config = _load(tmp_path, BASE + 'model_config { model_class: "dnn" }', '{"data_config.input_type": "CSVInput"}')
    with pytest.raises(ConfigError, match="CSVInput reads file_train_input"):
        validate_pipeline_config(config)
    with pytest.raises(ConfigError) as e:
        parse_pipeline_config(BASE.replace('label_fields: "label" }', 'label_fields: "label" input_type: OdpsInputV2 }'))
    assert e.value.path == "data_config.input_type"
    config = _load(tmp_path, BASE + 'model_config { model_class: "dnn" } train_config { incr_save_config { '
                   'sparse_save_secs: 10 fs { mount_path: "/home/admin/x" } } }')
    assert config.train_config.incr_save_config.fs.incr_save_dir == "/tmp/m/incr_save"
    absolute = _load(tmp_path, BASE + 'model_config { model_class: "dnn" } train_config { incr_save_config { '
                     'fs { incr_save_dir: "/data/updates" } } }')
    assert absolute.train_config.incr_save_config.fs.incr_save_dir == "/data/updates"


def test_the_converter_writes_a_config_in_this_projects_form(tmp_path):
    source = tmp_path / "easyrec.config"
    source.write_text(easyrec_config(VARIANTS["older_offsets"][0], wrapped_features=True))
    target = tmp_path / "converted.config"
    proc = subprocess.run([PYTHON, "-m", "easyonline.tools.from_easyrec", str(source), str(target)], cwd=ROOT,
                          env=python_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "5 EasyRec settings dropped" in proc.stdout
    converted = target.read_text()
    assert "# dropped (means nothing here): data_config.prefetch_size" in converted
    config = pipeline_pb2.PipelineConfig()
    from google.protobuf import text_format  # pylint: disable=g-import-not-at-top
    text_format.Parse(converted, config)  # the strict parser: no EasyRec form is left
    assert len(config.feature_configs) == 23 and config.kafka_train_input.offset_info == '{"0": 0}'
    bad = tmp_path / "bad.config"
    bad.write_text(easyrec_config(VARIANTS["older_offsets"][0]).replace('feature_names: "c21" wide_deep: WIDE',
                                                                       'feature_names: "c22" wide_deep: WIDE'))
    proc = subprocess.run([PYTHON, "-m", "easyonline.tools.from_easyrec", str(bad), str(tmp_path / "x")], cwd=ROOT,
                          env=python_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "feature_groups[1].feature_names" in proc.stderr


def test_a_field_given_twice_takes_its_last_value_as_easyrec_with_a_warning_naming_it(tmp_path, caplog):
    """EasyRec reads configs with text_format.Merge (its multi_tower_on_taobao_sok sample sets
    log_step_count_steps twice); an unknown field stays an error naming it."""
    text = BASE + "train_config {\n  num_steps: 10\n  num_steps: 30\n}\n"
    with caplog.at_level(logging.WARNING, logger="easyonline.config.loader"):
        config = _load(tmp_path, text)
    assert config.train_config.num_steps == 30
    assert "config field train_config.num_steps is given more than once" in caplog.text
    assert "c.config:10)" in caplog.text  # the second one: BASE is 7 lines, then "train_config {" and two more
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, text + "train_config { num_stepz: 1 }\n")
    assert e.value.path == "train_config.num_stepz"


def test_easyrec_export_config_fields_are_accepted_and_named_in_the_one_warning(tmp_path, caplog):
    """The shapes of EasyRec's multi_tower best-export, early-stop and multi-value export samples."""
    text = BASE + """export_config {
  exporter_type: "best" best_exporter_metric: "gauc" exports_to_keep: 2 max_check_steps: 50 enable_early_stop: true
  multi_value_fields { input_name: 'u' input_name: 'i' }
  placeholder_named_by_input: true
}
"""
    with caplog.at_level(logging.WARNING, logger="easyonline.config.easyrec_compat"):
        config = _load(tmp_path, text)
    assert not config.HasField("export_config")
    warnings = [r.getMessage() for r in caplog.records if "accepted and ignored" in r.getMessage()]
    assert len(warnings) == 1 and "export_config (" in warnings[0]
