"""Config parsing, overrides and validation: every error names the field's path."""
import os

import pytest

from easyonline.config import ConfigError, apply_edit_config_json, load_pipeline_config, parse_pipeline_config
from easyonline.config.validate import validate_pipeline_config
from tests.conftest import SAMPLES, online_config


def test_sample_configs_are_valid():
    validate_pipeline_config(load_pipeline_config(os.path.join(SAMPLES, "online.config")), online=True)
    validate_pipeline_config(load_pipeline_config(os.path.join(SAMPLES, "offline.config")), online=False)
    multitask = load_pipeline_config(os.path.join(SAMPLES, "online_multitask.config"))
    validate_pipeline_config(multitask, online=True)
    from easyonline.features import build_feature_specs  # pylint: disable=g-import-not-at-top
    from easyonline.features.vector_csv import supports  # pylint: disable=g-import-not-at-top
    specs = build_feature_specs(multitask)
    assert specs.label_kinds == {"label": "binary", "buy": "binary"}
    assert supports(specs, multitask.data_config)  # both labels ride the reader process's arrays


def test_unknown_field_names_its_path():
    text = 'model_dir: "x"\ntrain_config {\n  optimizer_config { adam_optimizer { learnin_rate: 0.1 } }\n}\n'
    with pytest.raises(ConfigError) as e:
        parse_pipeline_config(text)
    assert e.value.path == "train_config.optimizer_config.adam_optimizer.learnin_rate"
    assert ":3:" in str(e.value)


def test_a_typo_says_its_position_once_and_the_closest_names():
    """The position read ``x.config:55:3: 55:3 :`` (protobuf's, repeated) and no name was suggested."""
    with pytest.raises(ConfigError) as e:
        parse_pipeline_config("model_dir: \"x\"\ndata_config {\n  batch_sise: 8\n}\n", "x.config")
    assert "x.config:3:3: Message type" in str(e.value) and str(e.value).count("3:3") == 1, str(e.value)
    assert str(e.value).endswith("Did you mean batch_size, batch_timeout_ms or prefetch_size?"), str(e.value)
    with pytest.raises(ConfigError, match=r"no value named KafkaInpt\. Did you mean KafkaInput\?$"):
        parse_pipeline_config("data_config { input_type: KafkaInpt }", "x.config")


def test_missing_file():
    with pytest.raises(ConfigError, match="does not exist"):
        load_pipeline_config("/nonexistent/online.config")


def test_edit_config_json_sets_nested_indexed_and_map_fields(tmp_path):
    config = online_config(tmp_path)
    apply_edit_config_json(config, '{"train_config.num_steps": 7, "feature_configs[14].embedding_dim": 8,'
                                   ' "kafka_train_input.offset_info": "{\\"0\\": 5}",'
                                   ' "kafka_train_input.config": {"max_partition_fetch_bytes": "2097152"},'
                                   ' "data_config.input_fields[0].input_type": "INT64"}')
    assert config.train_config.num_steps == 7
    assert config.feature_configs[14].embedding_dim == 8
    assert config.kafka_train_input.offset_info == '{"0": 5}'
    assert config.kafka_train_input.config["max_partition_fetch_bytes"] == "2097152"
    assert config.data_config.input_fields[0].input_type == 1


@pytest.mark.parametrize("edits, path", [
    ({"train_config.num_stepz": 1}, "train_config.num_stepz"),
    ({"feature_configs[99].embedding_dim": 1}, "feature_configs[99]"),
    ({"data_config.input_fields[0].input_type": "UINT8"}, "data_config.input_fields[0].input_type"),
    ({"train_config.num_steps": "many"}, "train_config.num_steps"),
    ({"feature_configs[0]": {"embedding_dimm": 3}}, "feature_configs[0]"),
    ({"feature_configs[0]": 5}, "feature_configs[0]"),
])
def test_edit_config_json_errors_name_the_path(tmp_path, edits, path):
    with pytest.raises(ConfigError) as e:
        apply_edit_config_json(online_config(tmp_path), edits)
    assert e.value.path == path


@pytest.mark.parametrize("edits, path", [
    ({"model_dir": ""}, "model_dir"),
    ({"kafka_train_input.server": "nohostport"}, "kafka_train_input.server"),
    ({"kafka_train_input.topic": ""}, "kafka_train_input.topic"),
    ({"kafka_train_input.offset_info": "{bad json"}, "kafka_train_input.offset_info"),
    ({"kafka_train_input.offset_info": '{"0": -1}'}, "kafka_train_input.offset_info"),
    ({"kafka_train_input.offset_time": "yesterday"}, "kafka_train_input.offset_time"),
    ({"kafka_train_input.offset_info": '{"0": 1}', "kafka_train_input.offset_time": "1650765731"},
     "kafka_train_input"),
    ({"data_config.batch_size": 0}, "data_config.batch_size"),
    ({"data_config.separator": ",,"}, "data_config.separator"),
    ({"data_config.label_fields": ["nope"]}, "data_config.label_fields[0]"),
    ({"feature_configs[20].input_names": ["C99"]}, "feature_configs[20].input_names[0]"),
    ({"feature_configs[20].embedding_dim": 0}, "feature_configs[20].embedding_dim"),
    ({"feature_configs[0].input_names": ["C1"]}, "feature_configs[0].input_names[0]"),
    ({"feature_configs[20].combiner": "max"}, "feature_configs[20].combiner"),
    ({"feature_configs[20].feature_type": "ComboFeature"}, "feature_configs[20].input_names"),  # one input
    ({"feature_configs[20].feature_type": "ComboFeature", "feature_configs[20].input_names": ["C8", "I1"]},
     "feature_configs[20].input_names[1]"),  # a float input
    ({"feature_configs[20].feature_type": "ComboFeature", "feature_configs[20].input_names": ["C8", "C9"],
      "feature_configs[20].combo_input_seps": ["|", "|", "|"]}, "feature_configs[20].combo_input_seps"),
    ({"feature_configs[20].combo_input_seps": ["|"]}, "feature_configs[20].combo_input_seps"),
    ({"feature_configs[20].boundaries": [1.0]}, "feature_configs[20].boundaries"),  # an IdFeature
    ({"feature_configs[0].boundaries": [2.0, 1.0], "feature_configs[0].embedding_dim": 16},
     "feature_configs[0].boundaries"),
    ({"feature_configs[0].boundaries": [1.0, 2.0]}, "feature_configs[0].embedding_dim"),
    ({"model_config.model_class": "xgboost"}, "model_config.model_class"),
    ({"model_config.deepfm.dnn.dropout_ratio": 1.5}, "model_config.deepfm.dnn.dropout_ratio"),
    ({"train_config.optimizer_config.adam_optimizer.learning_rate": 0}, "train_config.optimizer_config.adam_optimizer.learning_rate"),
    ({"train_config.keep_checkpoint_max": 0}, "train_config.keep_checkpoint_max"),
    ({"feature_configs[20].embedding_dim": 8}, "feature_configs"),  # DeepFM: one dim for all
    ({"feature_configs[20].admission": {"probability_filter": {"probability": 1.5}}},
     "feature_configs[20].admission.probability_filter.probability"),
    ({"feature_configs[20].eviction": {"show_click_decay_rate": 0}}, "feature_configs[20].eviction.show_click_decay_rate"),
    ({"train_config.shrink_at_hour": 24}, "train_config.shrink_at_hour"),
    ({"kafka_train_input.config": {"max_pol_records": "5"}}, "kafka_train_input.config[max_pol_records]"),
    ({"kafka_train_input.client": "CONFLUENT_KAFKA", "kafka_train_input.config": {"max_poll_records": "5"}},
     "kafka_train_input.config[max_poll_records]"),  # no librdkafka equivalent
    ({"train_config.incr_save_config": {"sparse_save_secs": 1}}, "train_config.incr_save_config"),
    ({"train_config.incr_save_config": {"kafka": {"topic": "u"}}}, "train_config.incr_save_config.kafka.server"),
    ({"train_config.incr_save_config": {"kafka": {"server": "127.0.0.1:1"}}}, "train_config.incr_save_config.kafka.topic"),
    ({"train_config.incr_save_config": {"kafka": {"server": "h:1", "topic": "u", "config": {"ack": "all"}}}},
     "train_config.incr_save_config.kafka.config[ack]"),
    ({"train_config.incr_save_config": {"fs": {"incr_save_dir": ""}}}, "train_config.incr_save_config.fs.incr_save_dir"),
    ({"train_config.incr_save_config": {"fs": {"incr_save_dir": "/x"}, "max_message_bytes": 100}},
     "train_config.incr_save_config.max_message_bytes"),
    ({"train_config.incr_save_config": {"fs": {"incr_save_dir": "/x"}, "sparse_save_secs": -1}},
     "train_config.incr_save_config.sparse_save_secs"),
    ({"train_config.incr_save_config": {"fs": {"incr_save_dir": "/x"}, "full_sync_send_bytes": 0}},
     "train_config.incr_save_config.full_sync_send_bytes"),
    ({"train_config.inference_save_config": {"part_bytes": 100}}, "train_config.inference_save_config.part_bytes"),
])
def test_validation_names_the_bad_field(tmp_path, edits, path):
    config = online_config(tmp_path)
    apply_edit_config_json(config, edits)
    with pytest.raises(ConfigError) as e:
        validate_pipeline_config(config, online=True)
    assert e.value.path == path, str(e.value)


def test_online_needs_kafka(tmp_path):
    config = online_config(tmp_path)
    config.ClearField("kafka_train_input")
    with pytest.raises(ConfigError) as e:
        validate_pipeline_config(config, online=True)
    assert e.value.path == "kafka_train_input"


def test_offset_info_timestamp_form_is_accepted(tmp_path):
    config = online_config(tmp_path, **{"kafka_train_input.offset_info": '{"timestamp": 1650765731}'})
    validate_pipeline_config(config, online=True)


def test_samples_that_publish_updates_start_without_a_warning(caplog, monkeypatch):
    """A W line must mean something to the operator (docs/operations.md), yet every start of the shipped samples
    warned ``updates are published as model 'online', the last part of model_dir ...: set
    incr_save_config.model_name``: each sample that publishes names its model."""
    from easyonline.jobs.default_callbacks import default_callbacks  # pylint: disable=g-import-not-at-top
    monkeypatch.setenv("KAFKA_PASSWORD", "secret")  # online_sasl_ssl.config's ${KAFKA_PASSWORD}
    publishing = []
    for name in sorted(os.listdir(SAMPLES)):
        if not name.endswith(".config"):
            continue
        config = load_pipeline_config(os.path.join(SAMPLES, name))
        if not config.train_config.HasField("incr_save_config"):
            continue
        publishing.append(name)
        caplog.clear()
        with caplog.at_level("WARNING"):
            default_callbacks(config)  # the trainer's callbacks, IncrementalPublish among them
        # (our loggers': a library's line here would come from another test's client, collected meanwhile)
        ours = [r.getMessage() for r in caplog.records if r.levelno >= 30 and r.name.startswith("easyonline")]
        assert not ours, (name, caplog.text)
        assert config.train_config.incr_save_config.model_name, name
    assert publishing == ["online.config", "online_multitask.config", "online_sasl_ssl.config"], publishing
