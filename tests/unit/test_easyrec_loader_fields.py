"""EasyRec's range names (auto_expand_input_fields, feature groups' "field[1-3]"), file_shard, raw_input_dim's
checks and train_distribute: configs of this test's own, in the shape of EasyRec's samples that use them."""
import logging

import pytest

from easyonline.config import ConfigError, load_pipeline_config
from easyonline.config.easyrec_compat import expand_range, normalize
from easyonline.config.validate import validate_pipeline_config
from easyonline.distributed.cluster_config import ClusterConfig
from easyonline.distributed.strategy import SYNCHRONOUS, distribution_warning, log_distribution
from easyonline.features.feature_spec import build_feature_specs
from easyonline.protos import pipeline_pb2

Strategy = pipeline_pb2.DistributionStrategy

# The shape of EasyRec's multi_tower_export / multi_tower_with_embed samples (written here, not copied).
RANGES = """train_input_path: "data/test/export/data.csv"
kafka_train_input {{ server: "127.0.0.1:9092" topic: "t" }}
model_dir: "/tmp/m"
train_config {{ num_steps: 500 sync_replicas: true {train} }}
data_config {{
  input_fields {{ input_name: 'label' input_type: INT32 }}
  input_fields {{ input_name: 'f[1-2]' input_type: STRING default_val: "x" }}
  input_fields {{ input_name: "n[3-4]" input_type: DOUBLE }}
  input_fields {{ input_name: "vec" input_type: STRING }}
  {auto}
  {shard}
  label_fields: 'label'
  input_type: KafkaInput
}}
feature_config: {{
  features: {{ input_names: 'f1' feature_type: IdFeature embedding_dim: 4 hash_bucket_size: 200 }}
  features: {{ input_names: 'f2' feature_type: IdFeature embedding_dim: 4 }}
  features: {{ input_names: 'n3' feature_type: RawFeature }}
  features: {{ input_names: 'n4' feature_type: RawFeature }}
  features: {{ input_names: 'vec' feature_type: RawFeature raw_input_dim: 3 {vec} }}
}}
model_config: {{
  model_class: 'MultiTower'
  feature_groups: {{ group_name: 'tower0' feature_names: 'f[1-2]' feature_names: 'n[3-4]' feature_names: 'vec'
                     wide_deep: DEEP }}
  multi_tower {{ towers {{ input: "tower0" dnn {{ hidden_units: [8] }} }} }}
}}
"""


def _text(auto="auto_expand_input_fields: true", shard="", vec="", train=""):
    return RANGES.format(auto=auto, shard=shard, vec=vec, train=train).replace(
        'train_input_path: "data/test/export/data.csv"\n', "")


def _load(tmp_path, text: str):
    path = tmp_path / "c.config"
    path.write_text(text)
    config = load_pipeline_config(str(path))
    validate_pipeline_config(config, online=True)
    return config


def test_range_names_expand_to_their_fields_with_type_and_default_and_groups_take_ranges_too(tmp_path):
    config = _load(tmp_path, _text())
    fields = [(f.input_name, pipeline_pb2.DataConfig.FieldType.Name(f.input_type), f.default_val)
              for f in config.data_config.input_fields]
    assert fields == [("label", "INT32", ""), ("f1", "STRING", "x"), ("f2", "STRING", "x"), ("n3", "DOUBLE", ""),
                      ("n4", "DOUBLE", ""), ("vec", "STRING", "")]
    assert list(config.model_config.feature_groups[0].feature_names) == ["f1", "f2", "n3", "n4", "vec"]
    assert not config.data_config.HasField("auto_expand_input_fields")  # read: the config is in this form now
    before = config.SerializeToString(deterministic=True)
    normalize(config)
    assert config.SerializeToString(deterministic=True) == before


def test_without_auto_expand_a_range_field_stays_one_field_and_its_features_are_refused(tmp_path):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, _text(auto=""))
    assert e.value.path == "feature_configs[0].input_names[0]" and "'f1' is not an input field" in str(e.value)


def test_expand_range_is_easyrecs_rule_and_a_backward_range_names_its_field():
    assert expand_range("field[1-3]", "p") == ["field1", "field2", "field3"]
    assert expand_range("a_b[9-10]", "p") == ["a_b9", "a_b10"]
    assert expand_range("x[1-3]y", "p") == ["x[1-3]y"] and expand_range("f2[1-2]", "p") == ["f2[1-2]"]
    with pytest.raises(ConfigError) as e:
        expand_range("f[3-1]", "data_config.input_fields[1].input_name")
    assert e.value.path == "data_config.input_fields[1].input_name"


def test_file_shard_is_accepted_and_named_in_the_one_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        config = _load(tmp_path, _text(shard="file_shard: true"))
    warnings = [r.getMessage() for r in caplog.records if "accepted and ignored" in r.getMessage()]
    assert len(warnings) == 1 and "data_config.file_shard (each trainer of a cluster reads its own" in warnings[0]
    assert not config.data_config.HasField("file_shard")


def test_a_vector_raw_feature_is_dim_dense_columns_of_its_group(tmp_path):
    config = _load(tmp_path, _text(vec='separator: ";" min_val: 1 max_val: 3'))
    specs = build_feature_specs(config)
    vec = specs.raw_features[-1]
    assert (vec.name, vec.dim, vec.separator, vec.min_val, vec.max_val) == ("vec", 3, ";", 1.0, 3.0)
    assert [f.dim for f in specs.raw_features] == [1, 1, 3] and specs.dense_width == 5
    assert specs.dense_columns(["vec", "n3"]) == [2, 3, 4, 0] and specs.dense_columns(["f1"]) == []


@pytest.mark.parametrize("edit, field, why", [
    ("raw_input_dim: 0", "feature_configs[4].raw_input_dim", "must be in [1, 4096]"),
    ("boundaries: [1, 2]", "feature_configs[4].raw_input_dim", "without boundaries is a vector"),
    ('separator: ","', "feature_configs[4].separator", "one character other than data_config.separator"),
    ('separator: "ab"', "feature_configs[4].separator", "one character other than data_config.separator"),
])
def test_a_wrong_vector_raw_feature_names_its_field(tmp_path, edit, field, why):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, _text(vec=edit))
    assert e.value.path == field and why in str(e.value)


def test_a_vector_raw_feature_reads_a_string_field_and_an_id_feature_has_no_raw_input_dim(tmp_path):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, _text().replace('input_name: "vec" input_type: STRING', 'input_name: "vec" input_type: FLOAT'))
    assert e.value.path == "feature_configs[4].input_names[0]" and "STRING input field" in str(e.value)
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, _text().replace("feature_type: IdFeature embedding_dim: 4 }",
                                        "feature_type: IdFeature embedding_dim: 4 raw_input_dim: 2 }"))
    assert e.value.path == "feature_configs[1].raw_input_dim"


CHIEF = ClusterConfig({"chief": ["h0:1"], "ps": ["h1:1", "h2:1"], "worker": ["h3:1"]}, "worker", 0)


@pytest.mark.parametrize("name", Strategy.keys())
def test_each_train_distribute_loads_and_says_what_runs_here(tmp_path, caplog, name):
    """NoStrategy and PSStrategy mean what runs (PSStrategy an info line); every synchronous / GPU strategy of
    EasyRec's enum loads and gives one warning naming it and what runs instead: one process, or the ps cluster."""
    config = _load(tmp_path, _text(train=f"train_distribute: {name}"))
    train = config.train_config
    assert train.train_distribute == Strategy.Value(name)
    for cluster, runs in ((None, "this trainer runs as one process on the CPU (no TF_CONFIG)"),
                          (CHIEF, "this process runs as trainer 1 of 2 of the asynchronous parameter-server "
                                  "cluster TF_CONFIG names (2 ps)")):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="easyonline.distributed.strategy"):
            log_distribution(train, cluster)
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
        if Strategy.Value(name) in SYNCHRONOUS:
            assert len(warnings) == 1 and not infos
            assert warnings[0].startswith(f"train_config.train_distribute: {name} (EasyRec: ")
            assert f"is not available here: {runs}" in warnings[0]
        elif name == "PSStrategy":
            assert not warnings and len(infos) == 1
            assert infos[0].startswith(f"train_config.train_distribute: PSStrategy: {runs}")
        else:
            assert name == "NoStrategy" and not warnings and not infos


def test_num_gpus_per_worker_is_named_in_the_warning(tmp_path):
    ps_2gpu = _load(tmp_path, _text(train="train_distribute: PSStrategy num_gpus_per_worker: 2")).train_config
    assert distribution_warning(ps_2gpu, None) == (
        "train_config.train_distribute: PSStrategy: this trainer runs as one process on the CPU (no TF_CONFIG); "
        "num_gpus_per_worker: 2 is ignored (no GPU training here)")
    mirrored = _load(tmp_path, _text(train="train_distribute: MirroredStrategy num_gpus_per_worker: 4")).train_config
    assert distribution_warning(mirrored, None).endswith("; num_gpus_per_worker: 4 is ignored (no GPU training here)")
    one_gpu = _load(tmp_path, _text(train="num_gpus_per_worker: 1")).train_config
    assert distribution_warning(one_gpu, None) is None


def test_an_unknown_strategy_is_an_error_naming_the_field(tmp_path):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, _text(train="train_distribute: TpuStrategy"))
    assert e.value.path == "train_config.train_distribute"
