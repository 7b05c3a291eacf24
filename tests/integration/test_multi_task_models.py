"""The multi-task and multi-tower models (MMoE, DBMTL, ESMM, MultiTower, DCN) train through the broker, and
the updates they publish replay into a copy equal to the trained model, bit for bit.

One small stream for all: two labels (clk, and buy, a conversion only ever after a click), three raw
features and six id features in two feature groups (user, item).
"""

import numpy as np
import pytest
import tensorflow as tf

from easyonline.config import ConfigError, apply_edit_config_json, parse_pipeline_config
from easyonline.config.loader import to_text
from easyonline.config.validate import validate_pipeline_config
from easyonline.core.metrics import PrequentialMetrics
from easyonline.inputs import KafkaInput
from easyonline.jobs.online_train import build_trainer
from easyonline.tools.stream_producer import SyntheticCtrStream, produce
from easyonline.updates.model_diff import differences_from_model
from easyonline.updates.param_ids import read_parameter_ids
from easyonline.distributed.cluster_config import ClusterConfig
from easyonline.distributed.train_graph import TrainGraph
from easyonline.features import build_feature_specs
from easyonline.features.signature import empty_features
from easyonline.models.builder import build_model
from easyonline.publish.base_delta import BASE, DELTA, list_complete_saves, load_inference_model
from easyonline.scoring.checkpoint_model import CheckpointModel
from easyonline.tools.local_cluster import LocalCluster
from easyonline.updates.codec import decode_update
from easyonline.updates.readers import DirectoryUpdateReader, KafkaUpdateReader
from easyonline.updates.replica import ParameterReplica
from easyonline.utils import preloaded_python
from tests.conftest import PYTHON, python_env
from tests.integration.test_cluster import _summary
from tests.integration.test_incremental_updates import ShrinkEvery, _replay
from tests.log_noise import foreign_lines

ID_FEATURES = ("C1", "C2", "C3", "C4", "C5", "C6")
RAW_FEATURES = ("I1", "I2", "I3")
GROUPS = """
  feature_groups { group_name: "user" feature_names: ["C1", "C2", "C3", "I1"] }
  feature_groups { group_name: "item" feature_names: ["C4", "C5", "C6", "I2", "I3"] }
"""
MMOE = """
  model_class: "MMoE"
  mmoe {
    expert_dnn { hidden_units: [16, 8] }
    num_expert: 3
    task_towers { tower_name: "ctr" label_name: "clk" dnn { hidden_units: [8] } }
    task_towers { tower_name: "cvr" label_name: "buy" dnn { hidden_units: [8] } weight: 0.5 }
    l2_regularization: 1e-6
  }
"""

DBMTL = """
  model_class: "DBMTL"
  dbmtl {
    bottom_dnn { hidden_units: [16] }
    expert_dnn { hidden_units: [8] }
    num_expert: 2
    task_towers { tower_name: "ctr" label_name: "clk" dnn { hidden_units: [8] } relation_dnn { hidden_units: [4] } }
    task_towers { tower_name: "cvr" label_name: "buy" dnn { hidden_units: [8] } relation_tower_names: ["ctr"]
                  relation_dnn { hidden_units: [4] } }
    l2_regularization: 1e-6
  }
"""

ESMM = """
  model_class: "ESMM"
  esmm {
    groups { input: "user" dnn { hidden_units: [8] } }
    groups { input: "item" dnn { hidden_units: [8] } }
    ctr_tower { tower_name: "ctr" label_name: "clk" dnn { hidden_units: [8] } }
    cvr_tower { tower_name: "cvr" label_name: "buy" dnn { hidden_units: [8] } }
    l2_regularization: 1e-6
  }
"""

MULTI_TOWER = """
  model_class: "MultiTower"
  multi_tower {
    towers { input: "user" dnn { hidden_units: [8] } }
    towers { input: "item" dnn { hidden_units: [8] } }
    final_dnn { hidden_units: [8] }
    l2_regularization: 1e-6
  }
"""

DCN = """
  model_class: "DCN"
  dcn {
    deep_tower { input: "all" dnn { hidden_units: [16, 8] } }
    cross_tower { input: "user" cross_num: 2 }
    final_dnn { hidden_units: [8] }
    l2_regularization: 1e-6
  }
"""


def lines(start: int, count: int):
    """clk,buy,I1,I2,I3,C1..C6: clk is the synthetic stream's label; buy follows clk on a third of C1's ids."""
    clk, numerics, cats = SyntheticCtrStream(informative=6, base_vocab=50).arrays(start, count)
    buy = clk * (cats[:, 0] % 3 == 0)
    return [",".join([str(c), str(b)] + [f"{v:g}" for v in n[:3]] + [str(i) for i in ids[:6]]).encode()
            for c, b, n, ids in zip(clk, buy, numerics, cats)]


def model_config_text(model: str, groups: str = "") -> str:
    return f"model_config {{ {groups} {model} }}"


def config_for(model: str, model_dir, groups: str = "", server: str = "", topic: str = "", publish_to: str = ""):
    fields = "".join(f'input_fields {{ input_name: "{n}" input_type: INT32 }}' for n in ("clk", "buy"))
    fields += "".join(f'input_fields {{ input_name: "{n}" input_type: FLOAT }}' for n in RAW_FEATURES)
    fields += "".join(f'input_fields {{ input_name: "{n}" input_type: STRING }}' for n in ID_FEATURES)
    features = "".join(f'feature_configs {{ input_names: "{n}" feature_type: RawFeature }}' for n in RAW_FEATURES)
    features += "".join(f'feature_configs {{ input_names: "{n}" feature_type: IdFeature embedding_dim: 4 }}'
                        for n in ID_FEATURES)
    publish = f'incr_save_config {{ sparse_save_steps: 2 dense_save_steps: 3 kafka {{ server: "{server}" ' \
              f'topic: "{publish_to}" }} }}' if publish_to else ""
    text = f"""
model_dir: "{model_dir}"
kafka_train_input {{ server: "{server or '127.0.0.1:9'}" topic: "{topic or 'none'}" group: "g" }}
data_config {{ {fields} label_fields: ["clk", "buy"] separator: "," batch_size: 200 batch_timeout_ms: 200 }}
{features}
{model_config_text(model, groups)}
train_config {{ optimizer_config {{ adam_optimizer {{ learning_rate: 0.05 }} }} save_checkpoints_secs: 0
               log_step_count_secs: 1 {publish} }}
"""
    config = parse_pipeline_config(text)
    validate_pipeline_config(config)
    return config


def train_and_replay(broker, topic, tmp_path, model: str, groups: str = "", samples: int = 6000):
    """Trains ``model`` through the broker while publishing; returns (trainer, summary) after checking that
    the published updates replay into a copy equal to the trained model."""
    broker.create_topic(topic, 2)
    produce(broker.bootstrap, topic, [lines(0, samples)], partitions=2)
    updates = topic + "_updates"
    config = config_for(model, tmp_path / "model", groups, broker.bootstrap, topic, updates)
    trainer = build_trainer(config, online=False, source=KafkaInput(config.kafka_train_input, 200, 200))
    summary = trainer.run()
    assert summary.samples == samples
    reader = KafkaUpdateReader(broker.bootstrap, updates)
    records = reader.read_available()
    reader.close()
    assert len(records) >= 3
    replica = _replay(records, "model")
    ids = read_parameter_ids(str(tmp_path / "model"))
    assert differences_from_model(replica, trainer.model, ids) == []
    assert len(ids.dense) > 0 and sum(len(t) for t in replica.tables.values()) > 0
    return trainer, summary


def outputs_of(trainer, count: int = 400):
    """The trained model's named outputs (EasyRec's names) on fresh samples, as numpy, and their labels."""
    parsed = trainer.parser.parse(lines(50000, count))
    named = trainer.model.task_outputs(trainer.model(parsed.features, training=False))
    return {name: value.numpy() for name, value in named.items()}, {n: v.numpy() for n, v in parsed.label_dict.items()}


def auc(labels, probs) -> float:
    metrics = PrequentialMetrics(len(labels))
    metrics.update(labels, probs)
    return metrics.auc()


def assert_binary_outputs(outputs, towers):
    """probs_<tower> and logits_<tower> for each tower, probs = sigmoid(logits)."""
    assert sorted(outputs) == sorted(f"{kind}_{t}" for t in towers for kind in ("probs", "logits"))
    for tower in towers:
        np.testing.assert_allclose(outputs[f"probs_{tower}"], 1 / (1 + np.exp(-outputs[f"logits_{tower}"])),
                                   rtol=1e-5)


def test_mmoe_trains_through_the_broker_and_its_updates_replay_exactly(broker, topic, tmp_path):
    trainer, summary = train_and_replay(broker, topic, tmp_path, MMOE)
    assert [(t.name, t.label_name, t.weight) for t in trainer.model.tasks] == [("ctr", "clk", 1.0), ("cvr", "buy", 0.5)]
    assert len(trainer.model.mixture.experts) == 3 and len(trainer.model.mixture.gates) == 2
    assert trainer.model.tasks[1].metrics.figures()["auc"] is not None  # every task's window metrics
    outputs, labels = outputs_of(trainer)
    assert_binary_outputs(outputs, ["ctr", "cvr"])
    # both towers learnt their label (an untrained tower scores about 0.5 on fresh samples)
    assert auc(labels["clk"], outputs["probs_ctr"]) > 0.65 and auc(labels["buy"], outputs["probs_cvr"]) > 0.65


def test_mmoe_with_deepfm_terms_trains_and_its_updates_replay_exactly(broker, topic, tmp_path):
    """deepfm_terms: each id row holds one first-order weight after its embedding, published and replayed
    with it; each task learns its own scale of the shared first-order and FM terms."""
    wide_groups = GROUPS + 'feature_groups { group_name: "wide" feature_names: ["C1", "I1"] wide_deep: WIDE }'
    model = MMOE.replace("l2_regularization: 1e-6", "l2_regularization: 1e-6 deepfm_terms: true")
    trainer, _ = train_and_replay(broker, topic, tmp_path, model, wide_groups)
    assert trainer.model.wide_dim == 1
    rows = trainer.model.tables.rows("C1").export()[1].numpy()
    assert rows.shape[1] == 4 + 1 and len(rows) >= 20
    scales = trainer.model.deepfm_scales.numpy()
    assert scales.shape == (2, 2) and np.all(np.abs(scales - 1.0) > 1e-4)  # learnt from 1, per task and term
    outputs, labels = outputs_of(trainer)
    assert_binary_outputs(outputs, ["ctr", "cvr"])
    assert auc(labels["clk"], outputs["probs_ctr"]) > 0.65 and auc(labels["buy"], outputs["probs_cvr"]) > 0.65


@pytest.mark.parametrize("edit, path", [
    ("num_expert: 3", "model_config.mmoe.num_expert"),  # -> 0
    ("dnn { hidden_units: [8] } weight: 0.5", "model_config.mmoe.task_towers[1].dnn.hidden_units[0]"),
    ('tower_name: "cvr" label_name: "buy"', "model_config.mmoe.task_towers[1].label_name"),
])
def test_mmoe_config_errors_name_the_field(tmp_path, edit, path):
    broken = {"num_expert: 3": "num_expert: 0",
              "dnn { hidden_units: [8] } weight: 0.5": "dnn { hidden_units: [0] } weight: 0.5",
              'tower_name: "cvr" label_name: "buy"': 'tower_name: "cvr" label_name: "sold"'}[edit]
    with pytest.raises(ConfigError) as raised:
        config_for(MMOE.replace(edit, broken), tmp_path)
    assert raised.value.path == path, raised.value


def test_dbmtl_trains_through_the_broker_and_its_updates_replay_exactly(broker, topic, tmp_path):
    trainer, _ = train_and_replay(broker, topic, tmp_path, DBMTL)
    model = trainer.model
    assert [(t.name, t.label_name) for t in model.tasks] == [("ctr", "clk"), ("cvr", "buy")]
    # cvr's relation_dnn reads its own dnn output (8) and ctr's relation output (4); ctr's only its own
    assert [r._layers[0].kernel.shape[0] for r in model.relation_dnns] == [8, 8 + 4]  # pylint: disable=protected-access
    assert model.bottom._layers[0].kernel.shape[1] == 16 and len(model.mixture.experts) == 2  # pylint: disable=protected-access
    outputs, labels = outputs_of(trainer)
    assert_binary_outputs(outputs, ["ctr", "cvr"])
    assert auc(labels["clk"], outputs["probs_ctr"]) > 0.65 and auc(labels["buy"], outputs["probs_cvr"]) > 0.65


@pytest.mark.parametrize("edit, broken, path", [
    ('relation_tower_names: ["ctr"]', 'relation_tower_names: ["ctr", "cvr"]',
     "model_config.dbmtl.task_towers[1].relation_tower_names[1]"),  # itself: not an earlier tower
    ("num_expert: 2", "num_expert: 0", "model_config.dbmtl.num_expert"),
    ("relation_dnn { hidden_units: [4] } }\n", "relation_dnn { dropout_ratio: 1.5 } }\n",
     "model_config.dbmtl.task_towers[0].relation_dnn.dropout_ratio"),
])
def test_dbmtl_config_errors_name_the_field(tmp_path, edit, broken, path):
    assert edit in DBMTL
    with pytest.raises(ConfigError) as raised:
        config_for(DBMTL.replace(edit, broken, 1), tmp_path)
    assert raised.value.path == path, raised.value


def bce(labels, probs):
    return -np.mean(labels * np.log(probs) + (1 - labels) * np.log(1 - probs))


def test_esmm_trains_through_the_broker_learns_ctcvr_over_every_impression_and_replays_exactly(broker, topic, tmp_path):
    trainer, _ = train_and_replay(broker, topic, tmp_path, ESMM, GROUPS)
    model = trainer.model
    assert [(t.name, t.label_name, t.times_label, t.weight) for t in model.tasks] == [
        ("ctr", "clk", "", 1.0), ("cvr", "buy", "", 0.0), ("ctcvr", "buy", "clk", 1.0)]
    assert model.tasks.label_names == ("clk", "buy")
    outputs, labels = outputs_of(trainer)
    assert_binary_outputs(outputs, ["ctr", "cvr", "ctcvr"])
    np.testing.assert_allclose(outputs["probs_ctcvr"], outputs["probs_ctr"] * outputs["probs_cvr"], rtol=1e-5)
    assert auc(labels["clk"], outputs["probs_ctr"]) > 0.65
    assert auc(labels["clk"] * labels["buy"], outputs["probs_ctcvr"]) > 0.65
    # the loss is EasyRec's: CTR's on clk, CTCVR's on clk * buy over every impression (a buy without a click
    # here, which the product ignores), none for CVR; plus the L2 penalties once
    parsed = trainer.parser.parse(lines(60000, 300))
    clk = parsed.label_dict["clk"].numpy()
    loss, logits = model.compute_loss(parsed.features, {"clk": clk, "buy": np.ones_like(clk)}, training=False)
    p_ctr, p_cvr = (1 / (1 + np.exp(-logits[name].numpy().astype(np.float64))) for name in ("ctr", "cvr"))
    by_hand = bce(clk, p_ctr) + bce(clk, p_ctr * p_cvr) + sum(float(x) for x in model.losses)
    assert abs(float(loss) - by_hand) < 1e-4 * by_hand


def test_the_ctcvr_logit_is_the_logit_of_the_product_and_finite_at_any_logits():
    from easyonline.models.esmm import product_logit  # pylint: disable=import-outside-toplevel
    # by hand: a = b = 0: p = 1/2 * 1/2 = 1/4, logit = log(1/4 / (3/4)) = -log 3
    assert abs(float(product_logit(tf.constant(0.0), tf.constant(0.0))) + np.log(3)) < 1e-6
    a = tf.constant([-60.0, -5.0, 0.3, 4.0, 60.0, 60.0, -60.0])
    b = tf.constant([-60.0, 2.0, -1.2, 4.0, 60.0, -60.0, 60.0])
    with tf.GradientTape() as tape:
        tape.watch([a, b])
        logit = product_logit(a, b)
        loss = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.ones_like(a), logits=logit))
    assert np.all(np.isfinite(logit.numpy())) and all(np.all(np.isfinite(g.numpy())) for g in tape.gradient(loss, [a, b]))
    product = tf.sigmoid(tf.cast(a, tf.float64)) * tf.sigmoid(tf.cast(b, tf.float64))
    np.testing.assert_allclose(tf.sigmoid(logit).numpy(), product.numpy(), rtol=1e-5, atol=1e-30)
    # both large: logit(p) ~ -log(e^-a + e^-b) = 60 - log 2
    assert abs(float(logit[4]) - (60 - np.log(2))) < 1e-4


@pytest.mark.parametrize("edit, broken, path", [
    ('ctr_tower { tower_name: "ctr" label_name: "clk" dnn { hidden_units: [8] } }', "",
     "model_config.esmm.ctr_tower"),
    ('groups { input: "item"', 'groups { input: "items"', "model_config.esmm.groups[1].input"),
    ('tower_name: "cvr"', 'tower_name: "ctcvr"', "model_config.esmm.cvr_tower.tower_name"),
    ('cvr_tower { tower_name: "cvr" label_name: "buy"', 'cvr_tower { tower_name: "cvr" label_name: "sold"',
     "model_config.esmm.cvr_tower.label_name"),
])
def test_esmm_config_errors_name_the_field(tmp_path, edit, broken, path):
    assert edit in ESMM
    with pytest.raises(ConfigError) as raised:
        config_for(ESMM.replace(edit, broken, 1), tmp_path, GROUPS)
    assert raised.value.path == path, raised.value


def test_multi_tower_trains_through_the_broker_and_its_updates_replay_exactly(broker, topic, tmp_path):
    trainer, _ = train_and_replay(broker, topic, tmp_path, MULTI_TOWER, GROUPS)
    model = trainer.model
    assert [(t.name, t.label_name) for t in model.tasks] == [("ctr", "clk")]  # one task: model_config.loss_type
    # user: C1..C3 (3 x 4) + I1; item: C4..C6 (3 x 4) + I2, I3; each batch-normalized, then its own DNN
    assert [d._layers[0].kernel.shape[0] for d in model.tower_dnns] == [13, 14]  # pylint: disable=protected-access
    assert model.final._layers[0].kernel.shape[0] == 16  # pylint: disable=protected-access
    moments = [n for n in read_parameter_ids(str(tmp_path / "model")).dense if "moving_mean" in n]
    assert len(moments) == 2  # the input norms' moments are dense parameters too (published, replayed)
    outputs, labels = outputs_of(trainer)
    assert sorted(outputs) == ["logits", "probs"]  # a single task's outputs carry no suffix
    assert auc(labels["clk"], outputs["probs"]) > 0.65


def test_multi_tower_config_errors_name_the_field(tmp_path):
    with pytest.raises(ConfigError) as raised:
        config_for(MULTI_TOWER.replace('input: "item"', 'input: "items"'), tmp_path, GROUPS)
    assert raised.value.path == "model_config.multi_tower.towers[1].input" and "'items'" in str(raised.value)
    wide = GROUPS.replace('feature_names: ["C1", "C2", "C3", "I1"]', 'feature_names: ["C1", "C2", "C3", "I1"] '
                          'wide_deep: WIDE')
    with pytest.raises(ConfigError) as raised:
        config_for(MULTI_TOWER, tmp_path, wide)
    assert raised.value.path == "model_config.multi_tower.towers[0].input" and "WIDE" in str(raised.value)
    with pytest.raises(ConfigError) as raised:
        config_for('model_class: "MultiTower" multi_tower { final_dnn { hidden_units: [8] } }', tmp_path, GROUPS)
    assert raised.value.path == "model_config.multi_tower.towers"


def test_dcn_trains_through_the_broker_and_its_updates_replay_exactly(broker, topic, tmp_path):
    trainer, _ = train_and_replay(broker, topic, tmp_path, DCN, GROUPS)
    model = trainer.model
    assert [(t.name, t.label_name) for t in model.tasks] == [("ctr", "clk")]
    # deep: 'all' (no group of that name: every feature, 6 x 4 + 3); cross: 'user' (3 x 4 + 1), 2 layers
    assert model.deep_dnn._layers[0].kernel.shape[0] == 27  # pylint: disable=protected-access
    assert [tuple(w.shape) for w in model.cross.kernels + model.cross.biases] == [(13,)] * 4
    assert model.final._layers[0].kernel.shape[0] == 8 + 13  # pylint: disable=protected-access
    outputs, labels = outputs_of(trainer)
    assert sorted(outputs) == ["logits", "probs"]
    assert auc(labels["clk"], outputs["probs"]) > 0.65


def test_the_cross_network_by_hand():
    from easyonline.models.dcn import CrossNet  # pylint: disable=import-outside-toplevel
    cross = CrossNet(2)
    x0 = tf.constant([[1.0, 2.0]])
    cross(x0)
    for variable, value in zip(cross.kernels + cross.biases, ([0.5, -1.0], [1.0, 1.0], [0.1, 0.2], [0.0, 0.0])):
        variable.assign(value)
    # x1 = x0 (x0 . w0) + b0 + x0 = [1, 2] * (0.5 - 2) + [0.1, 0.2] + [1, 2] = [-0.4, -0.8]
    # x2 = x0 (x1 . w1) + b1 + x1 = [1, 2] * (-1.2) + [-0.4, -0.8] = [-1.6, -3.2]
    np.testing.assert_allclose(cross(x0).numpy(), [[-1.6, -3.2]], rtol=1e-6)


@pytest.mark.parametrize("edit, broken, path", [
    ("cross_num: 2", "cross_num: 0", "model_config.dcn.cross_tower.cross_num"),
    ('cross_tower { input: "user"', 'cross_tower { input: "users"', "model_config.dcn.cross_tower.input"),
    ('deep_tower { input: "all" dnn { hidden_units: [16, 8] } }', "", "model_config.dcn.deep_tower"),
    ("final_dnn { hidden_units: [8] }", 'final_dnn { activation: "relu6" }', "model_config.dcn.final_dnn.activation"),
])
def test_dcn_config_errors_name_the_field(tmp_path, edit, broken, path):
    assert edit in DCN
    with pytest.raises(ConfigError) as raised:
        config_for(DCN.replace(edit, broken, 1), tmp_path, GROUPS)
    assert raised.value.path == path, raised.value


@pytest.mark.parametrize("model, labels", [("MMOE", ["buy", "clk"]), ("DBMTL", ["buy", "clk"]),
                                           ("ESMM", ["buy", "clk"]), ("MULTI_TOWER", ["clk"]), ("DCN", ["clk"])])
def test_every_model_builds_the_cluster_training_graph(tmp_path, model, labels):
    """The ps cluster's graph (built here without servers): a label feed per label the tasks learn from, and
    MultiTower's batch-norm moment updates run with the step."""
    config = config_for(globals()[model], tmp_path, GROUPS)
    cluster = ClusterConfig({"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2", "127.0.0.1:3"],
                             "worker": ["127.0.0.1:4"]}, "chief", 0)
    graph = TrainGraph(config, build_feature_specs(config), cluster)
    assert sorted(graph.label_feeds) == labels
    moments = [v for v in graph.model.variables if "moving" in v.name]
    assert len(moments) == (4 if model == "MULTI_TOWER" else 0)
    assert len(graph.parameter_updates) == 1 + len(moments)  # the optimizer's apply, and each moment's update


def test_single_task_tower_models_export_and_serve_what_the_trainer_scores(tmp_path):
    """The exports of a trained DCN and a trained MultiTower serve the trainers' scores. Both are exported by
    one process doing what ``python -m easyonline.export`` does (that command line is test_export_serve's)."""
    models = ("DCN", "MULTI_TOWER")
    expected = {}
    for model in models:
        (tmp_path / model).mkdir()
        config = file_config(tmp_path / model, globals()[model], 1000, GROUPS)
        trainer = build_trainer(config, online=False)
        trainer.run()
        expected[model], _ = outputs_of(trainer, 50)
    code = ("import sys\n"
            "from easyonline.config import load_pipeline_config\n"
            "from easyonline.export.exporter import export_saved_model\n"
            "for model_dir in sys.argv[1:]:\n"
            "    print(export_saved_model(load_pipeline_config(model_dir + '/pipeline.config'), model_dir + '_export'))\n")
    proc = preloaded_python.run([PYTHON, "-c", code] + [str(tmp_path / model / "model") for model in models], preload="trainer",
                          env=python_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not foreign_lines(proc.stderr), proc.stderr[-3000:]  # no TensorFlow/TFRA noise in what export logs
    versions = proc.stdout.strip().splitlines()[-len(models):]
    columns = list(zip(*[line.decode().split(",") for line in lines(50000, 50)]))[2:]  # (no labels)
    inputs = {name: tf.constant([float(v) for v in values]) if name in RAW_FEATURES else tf.constant(list(values))
              for name, values in zip(RAW_FEATURES + ID_FEATURES, columns)}
    for model, version in zip(models, versions):
        assert version.startswith(str(tmp_path / model / "model_export")), versions
        served = tf.saved_model.load(version).signatures["serving_default"](**inputs)
        assert sorted(served) == ["logits", "probs"]
        np.testing.assert_allclose(served["probs"].numpy(), expected[model]["probs"], rtol=1e-6)


def test_batch_norm_moments_stay_finite_through_the_empty_build_step(tmp_path):
    """The trainer creates its variables with a step on an empty batch; its moments (means over no sample)
    were NaN and went into the moving moments, so every score of a use_bn DNN was NaN."""
    config = file_config(tmp_path, 'model_class: "dnn" dnn { dnn { hidden_units: [8] use_bn: true } }', 400)
    trainer = build_trainer(config, online=False)
    moments = [v for v in trainer.model.variables if "moving" in v.name]
    assert len(moments) == 2 and [float(np.sum(v.numpy())) for v in moments] == [0.0, 8.0]  # as initialized
    trainer.run()
    assert all(np.all(np.isfinite(v.numpy())) for v in trainer.model.variables)
    assert trainer.metrics.auc() is not None


def file_config(tmp_path, model: str, samples: int, groups: str = "", **train):
    """``config_for`` reading a file of ``samples`` lines instead of a topic."""
    data = tmp_path / "samples.csv"
    data.write_bytes(b"\n".join(lines(0, samples)) + b"\n")
    config = config_for(model, tmp_path / "model", groups)
    config.ClearField("kafka_train_input")
    config.file_train_input.paths.append(str(data))
    apply_edit_config_json(config, train)
    return config


def test_mmoe_base_and_deltas_rebuild_the_trained_model_with_evictions(tmp_path):
    config = file_config(tmp_path, MMOE, 3000, **{"train_config.inference_save_config": {
        "delta_save_steps": 5, "delta_save_secs": 0, "base_save_at_hour": -1}})
    config.feature_configs[3].eviction.max_size = 20  # C1: evicted every 3 batches, deletes in the deltas
    trainer = build_trainer(config, online=False, callbacks=[ShrinkEvery(3)])
    trainer.run()  # 15 steps: a base at 5, deltas at 10 and 15
    saves = list_complete_saves(str(tmp_path / "model" / "inference"))
    assert [(s.kind, s.step) for s in saves] == [(BASE, 5), (DELTA, 10), (DELTA, 15)]
    assert sum(s.manifest["deletes"] for s in saves[1:]) > 0
    replica, _, ids = load_inference_model(str(tmp_path / "model" / "inference"))
    assert differences_from_model(replica, trainer.model, ids) == []
    assert any(name.startswith("mixture/gates/1/") for name in ids.dense)  # the second task's gate is in it


def test_a_two_ps_cluster_trains_mmoe_and_its_published_updates_equal_its_checkpoint(tmp_path):
    config = file_config(tmp_path, MMOE, 1200, **{"train_config.incr_save_config": {
        "sparse_save_steps": 2, "dense_save_steps": 3, "fs": {"incr_save_dir": str(tmp_path / "updates")}}})
    path = tmp_path / "cluster.config"
    path.write_text(to_text(config))
    with LocalCluster(2, 1, [f"--config={path}"], env=python_env()) as cluster:
        assert cluster.wait(300) == 0, cluster.chief_output()[-4000:]
    output = cluster.chief_output()
    summary = _summary(output)
    assert summary["samples"] == "1200"
    model = CheckpointModel(config)
    model.restore(summary["checkpoint"])
    assert [t.name for t in model.model.tasks] == ["ctr", "cvr"]
    records = DirectoryUpdateReader(str(tmp_path / "updates")).read_available()
    replica = ParameterReplica("model")
    for _, data in records:
        replica.apply(decode_update(data))
    assert differences_from_model(replica, model.model, read_parameter_ids(str(tmp_path / "model"))) == []
    # both towers trained: their logit layers moved from a fresh model's (the same seed) initial values
    fresh = build_model(config, model.specs)
    fresh(empty_features(model.specs))
    for trained, initial in zip(model.model.tower_logits, fresh.tower_logits):
        assert not np.array_equal(trained.kernel.numpy(), initial.kernel.numpy())


def test_an_id_feature_in_no_group_still_replays_exactly(broker, topic, tmp_path):
    """EasyRec's taobao samples declare features (final_gender_code) no group reads: their ids get no gradient,
    so their table stays empty, in the model as in the replica; the comparison once called two empty tables
    different (the replica's empty rows are [0, 0], the model's [0, 4])."""
    groups = GROUPS.replace('"C6", ', "")  # C6: a feature of no group
    assert "C6" not in groups
    trainer, _ = train_and_replay(broker, topic, tmp_path, DBMTL, groups, samples=2000)
    keys, _ = trainer.model.tables.embeddings["C6"].params.export()
    assert len(keys) == 0  # no gradient, no row: the table the comparison checked is empty in the model


def test_a_group_input_has_a_static_width_whatever_the_traced_shapes(tmp_path):
    """MultiTower's per-group batch norm ("length of shape with unknown rank") and MMoE's experts (None - int)
    build their weights from the group input's last dim, which a traced signature (the export's, the
    training step's) could leave unknown: the group input is [B, width] from the feature specs."""
    model = build_trainer(file_config(tmp_path, MULTI_TOWER, 10, GROUPS), online=False).model

    @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)] * 2)
    def user_input(embedding, dense):
        out = model.group_input("user", [embedding] * 6, dense)
        assert out.shape.as_list() == [None, 3 * 4 + 1]  # C1..C3 (dim 4 each) and I1
        return out

    out = user_input(tf.ones([2, 4]), tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    np.testing.assert_array_equal(out.numpy()[:, -1], [1.0, 4.0])  # I1: the first dense column
