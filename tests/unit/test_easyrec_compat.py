"""EasyRec's config forms: each is read as this project's, or named in one warning, or refused naming the field."""
import datetime
import logging
import subprocess
import time

import numpy as np
import pytest

from easyonline.config import ConfigError, load_pipeline_config, parse_pipeline_config
from easyonline.config.easyrec_compat import normalize, read_learning_rate_messages
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
    assert "# learning_rate { in a comment } stays" in read_learning_rate_messages(text)
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
    assert model(tensors).shape.as_list() == [2]
    assert any("final_dnn" in v.name for v in model.trainable_variables)
    with pytest.raises(ConfigError) as e:
        validate_pipeline_config(_load(tmp_path, BASE + groups.replace('["u", "x"]', '["u", "y"]')))
    assert e.value.path == "model_config.feature_groups[1].feature_names[1]"


def test_dead_line_stops_the_trainer_and_a_bad_one_is_refused(tmp_path):
    soon = (datetime.datetime.now() + datetime.timedelta(seconds=1)).strftime("%Y%m%d %H:%M:%S")

    class Trainer:
        reason = None

        def stop(self, reason):
            self.reason = reason

    trainer, deadline = Trainer(), StopAtDeadLine(soon)
    deadline.on_tick(trainer)
    assert trainer.reason is None
    time.sleep(2.1)
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
