"""EasyRec ODL configs train unchanged: the shapes of EasyRec's ``deepfm_combo_*kafka*.config`` samples.

EasyRec's files are not copied here: ``easyrec_config`` writes a config of the same shape from field
lists (Avazu's 23 fields; ``feature_config { features }`` or top-level ``feature_configs``; IdFeatures
with hash_bucket_size and num_buckets, bucketized RawFeatures, a ComboFeature; wide and deep
feature_groups; DeepFM with final_dnn and wide_output_dim; an exponentially decaying Adam;
log_step_count_steps, sync_replicas, prefetch_size, input_type, eval_config, export_config), in the five
variants of the samples' Kafka sections. Each trains on a generated Avazu-shaped stream through the
real local broker, with only server, topic and model_dir overridden, as the samples' users would.
"""
import json
import subprocess

import numpy as np
import pytest

from easyonline.utils import preloaded_python

from tests.conftest import PYTHON, ROOT, python_env

INT64_FIELDS = ("hour", "c1", "banner_pos", "c19", "c20", "c21")
STRING_FIELDS = ("site_id", "site_domain", "site_category", "app_id", "app_domain", "app_category", "device_id",
                 "device_ip", "device_model", "device_type", "device_conn_type", "c14", "c15", "c16", "c17", "c18")
FIELDS = ("label", "hour", "c1", "banner_pos") + STRING_FIELDS + ("c19", "c20", "c21")
BOUNDARIES = {"c1": [1000.0 + i for i in range(16)], "banner_pos": [1, 2, 3, 4, 5, 6],
              "c19": [10 * i for i in range(1, 20)], "c20": [100.0 * i for i in range(1, 15)],
              "c21": list(range(1, 26))}
SAMPLES = 4000

# The Kafka sections of the five samples (server/topic/group as they ship; the test overrides server and topic).
VARIANTS = {
    "offset_info": ("kafka_train_input { server: '127.0.0.1:9092' topic: 'kafka_op_test_topic' group: 'kafka_train' "
                    "offset_info: '{\"0\": 5, \"1\": 10}' }\n"
                    "kafka_eval_input { server: '127.0.0.1:9092' topic: 'kafka_op_test_topic' group: 'kafka_test' "
                    "offset_info: '{\"0\":20, \"1\":30}' }\n", SAMPLES - 15),
    "chief_redundant": ("kafka_train_input { server: '127.0.0.1:9092' topic: 't' group: 'kafka_train' "
                        "offset_info: '{\"0\": 5, \"1\": 10}' }\n", SAMPLES - 15),
    "offset_time_unix": ("kafka_train_input { server: '127.0.0.1:9092' topic: 't' group: 'kafka_train' "
                         "offset_time: '1650765731' }\n", SAMPLES),
    "offset_time_date": ("kafka_train_input { server: '127.0.0.1:9092' topic: 't' group: 'kafka_train' "
                         "offset_time: '20220517 20:00:00' }\n", SAMPLES),
    "older_offsets": ('kafka_train_input { server: "127.0.0.1" topic: "dwd_avazu" group: "deepfm_kafka" offset: 0 }\n'
                      'kafka_eval_input { server: "127.0.0.1" topic: "dwd_avazu" group: "deepfm_kafka" '
                      "partitions: 2 offset: [5, 8] }\n", SAMPLES),
}


def _feature(name: str) -> str:
    if name in BOUNDARIES:
        return (f'input_names: "{name}" feature_type: RawFeature boundaries: {BOUNDARIES[name]} '
                "embedding_dim: 16")
    extra = "num_buckets: 24" if name == "hour" else "hash_bucket_size: 1000"
    return f'input_names: "{name}" feature_type: IdFeature embedding_dim: 16 {extra}'


def easyrec_config(kafka_sections: str, wrapped_features: bool = True, chief_redundant: bool = False) -> str:
    """A config in the shape of EasyRec's deepfm_combo avazu Kafka samples."""
    features = [f for f in FIELDS if f != "label"]
    combo = ('input_names: ["site_id", "app_id"] feature_name: "site_id_app_id" feature_type: ComboFeature '
             "hash_bucket_size: 1000, embedding_dim: 16")
    bodies = [_feature(f) for f in features] + [combo]
    if wrapped_features:
        feature_text = "feature_config: {\n" + "".join(f"  features: {{ {b} }}\n" for b in bodies) + "}\n"
    else:
        feature_text = "".join(f"feature_configs: {{ {b} }}\n" for b in bodies)
    inputs = "".join(
        f'  input_fields: {{ input_name: "{f}" input_type: {"STRING" if f in STRING_FIELDS else "INT64"} '
        'default_val: "0" }\n' for f in FIELDS)
    groups = "".join(
        f"  feature_groups: {{ group_name: \"{group}\" "
        + "".join(f'feature_names: "{f}" ' for f in features + (["site_id_app_id"] if group == "deep" else []))
        + f"wide_deep: {group.upper()} }}\n" for group in ("deep", "wide"))
    return f"""{kafka_sections}
model_dir: "experiments/dwd_avazu_out_test_combo_kafka"
train_config {{
  log_step_count_steps: 200
  optimizer_config: {{
    adam_optimizer: {{
      learning_rate: {{
        exponential_decay_learning_rate {{
          initial_learning_rate: 0.0001 decay_steps: 10000 decay_factor: 0.5 min_learning_rate: 0.0000001
        }}
      }}
    }}
    use_moving_average: false
  }}
  sync_replicas: {str(not chief_redundant).lower()}
  save_checkpoints_steps: 500
  num_steps: 1000
}}
eval_config {{ num_examples: 10240 metrics_set: {{ auc {{}} }} }}
data_config {{
  separator: ","
{inputs}  label_fields: "label"
  batch_size: 1024
  prefetch_size: 32
  input_type: KafkaInput
{"  chief_redundant: true" if chief_redundant else ""}
}}
{feature_text}
model_config: {{
  model_class: "DeepFM"
{groups}  deepfm {{
    wide_output_dim: 16
    dnn {{ hidden_units: [128, 64, 32] }}
    final_dnn {{ hidden_units: [128, 64] }}
    l2_regularization: 1e-5
  }}
  embedding_regularization: 1e-7
}}
export_config {{ multi_placeholder: false }}
"""


def avazu_lines(count: int, seed: int = 3) -> list:
    """Avazu-shaped CSV lines; the label depends on the site, the app and the banner position."""
    rng = np.random.default_rng(seed)
    sites, apps = [f"{x:08x}" for x in rng.integers(0, 2**32, 50)], [f"{x:08x}" for x in rng.integers(0, 2**32, 30)]
    site_effect, app_effect = rng.normal(0, 1.5, len(sites)), rng.normal(0, 1.0, len(apps))
    lines = []
    for i in range(count):
        site, app, banner = int(rng.integers(len(sites))), int(rng.integers(len(apps))), int(rng.integers(0, 8))
        label = int(rng.random() < 1 / (1 + np.exp(-(site_effect[site] + app_effect[app] - 0.2 * banner))))
        strings = [sites[site], f"d{site % 7}", f"c{site % 5}", apps[app], f"ad{app % 4}", f"ac{app % 3}",
                   f"dev{rng.integers(500)}", f"ip{rng.integers(2000)}", f"m{rng.integers(40)}",
                   str(rng.integers(0, 5)), str(rng.integers(0, 4))] + [str(rng.integers(100, 600)) for _ in range(5)]
        numbers = [14102100 + i * 24 // count, 1005 + int(rng.integers(0, 3)), banner]
        tail = [int(rng.integers(0, 200)), int(rng.integers(-1, 1500)), int(rng.integers(0, 30))]
        lines.append(",".join(str(v) for v in [label] + numbers + strings + tail).encode())
    return lines


@pytest.fixture(scope="module")
def avazu_topic(broker):
    from easyonline.tools.stream_producer import produce  # pylint: disable=g-import-not-at-top
    name = "easyrec_avazu"
    broker.create_topic(name, 2)
    produce(broker.bootstrap, name, [avazu_lines(SAMPLES)], partitions=2)
    return name


def _train(config_text: str, broker, topic: str, tmp_path) -> subprocess.CompletedProcess:
    """Trains an EasyRec config with only server, topic and model_dir overridden, as the samples' users would."""
    path = tmp_path / "easyrec.config"
    path.write_text(config_text)
    edits = {"kafka_train_input.server": broker.bootstrap, "kafka_train_input.topic": topic,
             "model_dir": str(tmp_path / "model")}
    proc = preloaded_python.run([PYTHON, "-m", "easyonline.train", f"--pipeline_config_path={path}",
                           f"--edit_config_json={json.dumps(edits)}"],
                          cwd=ROOT, env=python_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


# Under CI the start by time and the older offset fields are scenarios (conftest.py): tests/unit/test_start_position.py
# and test_easyrec_compat.py check them without a trainer; offset_info and chief_redundant train everywhere.
@pytest.mark.parametrize("variant", [pytest.param(v, marks=pytest.mark.scenario)
                                     if v in ("offset_time_unix", "offset_time_date", "older_offsets") else v
                                     for v in sorted(VARIANTS)])
def test_an_easyrec_kafka_sample_trains_with_only_server_topic_and_model_dir_overridden(
        broker, avazu_topic, tmp_path, variant):
    sections, expected_samples = VARIANTS[variant]
    proc = _train(easyrec_config(sections, wrapped_features=variant != "older_offsets",
                                 chief_redundant=variant == "chief_redundant"), broker, avazu_topic, tmp_path)
    assert f"samples          {expected_samples}\n" in proc.stdout, proc.stdout
    assert "stopped because  input ended" in proc.stdout or "caught up" in proc.stdout, proc.stdout
    # One warning names what is accepted and ignored, each setting once.
    warnings = [line for line in proc.stderr.splitlines() if "EasyRec settings accepted and ignored" in line]
    assert len(warnings) == 1, proc.stderr[-4000:]
    for setting in ("hash_bucket_size / num_buckets of hour, site_id", "log_step_count_steps", "prefetch_size",
                    "export_config"):
        assert warnings[0].count(setting) == 1, warnings[0]
    assert ("data_config.chief_redundant" in warnings[0]) == (variant == "chief_redundant")
    saved = (tmp_path / "model" / "pipeline.config").read_text()
    assert "exponential_decay_learning_rate" in saved and "feature_config {" not in saved


def _other_sample(name: str) -> str:
    """EasyRec's non-Kafka samples, given a Kafka input as a user would: the shapes of
    ``wide_and_deep_two_opti`` / ``wide_and_deep_on_avazau_ctr`` and of ``deepfm_on_criteo_tfrecord`` /
    ``deepfm_combo_v2`` / ``deepfm_vocab_list``, on the Avazu-shaped fields."""
    text = easyrec_config(VARIANTS["offset_time_unix"][0]).replace("  prefetch_size: 32\n", "  num_epochs: 10000\n")
    if name == "wide_and_deep_two_optimizers":
        text = text.replace("""  optimizer_config: {
    adam_optimizer""", """  optimizer_config: {
    ftrl_optimizer: { l1_reg: 10 learning_rate: { constant_learning_rate { learning_rate: 0.05 } } }
  }
  optimizer_config: {
    adam_optimizer""")
        text = text.replace('model_class: "DeepFM"', 'model_class: "WideAndDeep"').replace("deepfm {", "wide_and_deep {")
        text = text.replace("l2_regularization: 1e-5", "l2_regularization: 1e-4")
        return text.replace("eval_config {{ num_examples: 10240 metrics_set: {{ auc {{}} }} }}".replace("{{", "{")
                            .replace("}}", "}"), 'eval_config { metrics_set: { auc {} } metrics_set: { gauc { '
                            'uid_field: "device_id" } } eval_online: true }')
    text = text.replace('input_names: "c20" feature_type: RawFeature boundaries: ' + str(BOUNDARIES["c20"]),
                        'input_names: "c20" feature_type: RawFeature min_val: -1.0 max_val: 1500.0')
    text = text.replace('input_names: "device_type" feature_type: IdFeature',
                        'input_names: "device_type" feature_type: IdFeature vocab_list: ["0", "1", "2", "3"]')
    text = text.replace('feature_type: ComboFeature', 'feature_type: ComboFeature combo_join_sep: "X"')
    text = text.replace("""adam_optimizer: {
      learning_rate: {
        exponential_decay_learning_rate {
          initial_learning_rate: 0.0001 decay_steps: 10000 decay_factor: 0.5 min_learning_rate: 0.0000001
        }
      }
    }""", """momentum_optimizer: {
      learning_rate: { constant_learning_rate { learning_rate: 0.01 } }
      momentum_optimizer_value: 0.9
    }""")
    return text.replace("l2_regularization: 1e-5\n", "l2_regularization: 1e-5\n    wide_regularization: 1e-4\n") \
        .replace("embedding_regularization: 1e-7", "embedding_regularization: 1e-7\n  loss_type: CLASSIFICATION\n"
                 "  num_class: 1")


@pytest.mark.parametrize("name", ["wide_and_deep_two_optimizers", "deepfm_criteo_shape"])
def test_other_easyrec_samples_given_a_kafka_input_train(broker, avazu_topic, tmp_path, name):
    proc = _train(_other_sample(name), broker, avazu_topic, tmp_path)
    assert f"samples          {SAMPLES}\n" in proc.stdout, proc.stdout
    warnings = [line for line in proc.stderr.splitlines() if "EasyRec settings accepted and ignored" in line]
    assert len(warnings) == 1 and "data_config.num_epochs" in warnings[0], proc.stderr[-4000:]
    saved = (tmp_path / "model" / "pipeline.config").read_text()
    if name == "wide_and_deep_two_optimizers":
        assert "eval_config.eval_online" in warnings[0] and 'uid_field: "device_id"' in saved
        assert "the first trains every embedding table here" in proc.stderr
        assert "sparse_optimizer_config" in saved and "l1_regularization_strength: 10" in saved
        assert "final_dnn" in saved and "wide_output_dim: 16" in saved
    else:
        assert "vocab_list of device_type" in warnings[0] and "combo_join_sep of site_id_app_id" in warnings[0]
        assert "sgd_optimizer" in saved and "momentum: 0.9" in saved and "max_val: 1500" in saved
