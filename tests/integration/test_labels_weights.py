"""Sample weights reach the loss, a regression task trains and reports its MSE, and bad labels and weights
are counted and dead-lettered through the real broker while the other samples train."""
import collections
import logging

import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()

import numpy as np
from kafka import KafkaConsumer

from easyonline.config import parse_pipeline_config
from easyonline.config.validate import validate_pipeline_config
from easyonline.core.callbacks import Callback
from easyonline.core.rejections import rejection_kind
from easyonline.features import CsvParser, build_feature_specs
from easyonline.jobs.online_train import build_trainer
from easyonline.models.builder import build_model
from easyonline.tools.stream_producer import SyntheticCtrStream, produce
from easyonline.train.trainer import OnlineTrainer
from tests.conftest import online_config

TINY = """
model_dir: "{model_dir}"
file_train_input {{ paths: "{path}" }}
data_config {{
  input_fields {{ input_name: "click" input_type: FLOAT }}
  input_fields {{ input_name: "w" input_type: FLOAT default_val: "1" }}
  input_fields {{ input_name: "a" input_type: INT64 }}
  input_fields {{ input_name: "x" input_type: FLOAT }}
  label_fields: "click"
  sample_weight: "w"
  batch_size: 100
}}
feature_configs {{ input_names: "a" embedding_dim: 2 }}
feature_configs {{ input_names: "x" feature_type: RawFeature }}
model_config {{ model_class: "dnn" {loss} dnn {{ dnn {{ hidden_units: [4] }} }} }}
train_config {{ optimizer_config {{ sgd_optimizer {{ learning_rate: 0.1 }} }} save_checkpoints_secs: 0
               log_step_count_secs: 0.001 }}
"""


def _config(tmp_path, name="m", path="unused", loss=""):
    config = parse_pipeline_config(TINY.format(model_dir=tmp_path / name, path=path, loss=loss))
    validate_pipeline_config(config)
    return config


def _xent(label, logit):
    p = 1 / (1 + np.exp(-np.float64(logit)))
    return -(label * np.log(p) + (1 - label) * np.log(1 - p))


def test_a_weight_of_two_counts_a_sample_twice_in_the_loss_sum(tmp_path):
    config = _config(tmp_path)
    specs = build_feature_specs(config)
    model = build_model(config, specs)
    features = {"a": tf.constant([3, 4], tf.int64), "x": tf.constant([0.5, -1.0])}
    labels = {"click": tf.constant([1.0, 0.0])}
    loss, logits = model.compute_loss(features, labels, training=False, sample_weight=tf.constant([2.0, 1.0]))
    z = logits["ctr"].numpy()
    # SUM_BY_NONZERO_WEIGHTS: (2 * l_a + 1 * l_b) / 2 samples of nonzero weight
    assert np.isclose(loss.numpy(), (2 * _xent(1, z[0]) + _xent(0, z[1])) / 2, rtol=1e-5)
    twice = {"a": tf.constant([3, 3, 4], tf.int64), "x": tf.constant([0.5, 0.5, -1.0])}
    loss3, _ = model.compute_loss(twice, {"click": tf.constant([1.0, 1.0, 0.0])}, training=False,
                                  sample_weight=tf.constant([1.0, 1.0, 1.0]))
    assert np.isclose(loss.numpy() * 2, loss3.numpy() * 3, rtol=1e-5)  # the same sum: l_a + l_a + l_b


def _dense_after(tmp_path, name, lines):
    """The dense variables of a fresh model after one step on ``lines`` (same seed, same start)."""
    trainer = OnlineTrainer(_config(tmp_path, name), online=False)  # (its variables are built, not yet trained)
    batch = trainer.parser.parse(lines)
    trainer.train_batch(batch.features, batch.label_dict, batch.sample_weights)
    return [v.numpy() for v in trainer.model.deep.trainable_variables + trainer.model.deep_logit.trainable_variables]


def test_a_weight_zero_sample_changes_nothing_it_alone_would(tmp_path):
    alone = _dense_after(tmp_path, "alone", [b"1,1,3,0.5"])
    zero = _dense_after(tmp_path, "zero", [b"1,1,3,0.5", b"0,0,4,-1.0"])
    one = _dense_after(tmp_path, "one", [b"1,1,3,0.5", b"0,1,4,-1.0"])
    for a, z in zip(alone, zero):
        np.testing.assert_allclose(a, z, rtol=1e-6, atol=1e-7)
    assert any(not np.allclose(a, o, rtol=1e-6, atol=1e-7) for a, o in zip(alone, one))  # weight 1: it counts


class _Seen(Callback):
    """The pre-update predictions and labels of every batch, and every status line's figures."""

    def __init__(self):
        self.predictions, self.labels, self.logs = [], [], []

    def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
        self.predictions.append(np.asarray(probs))
        self.labels.append(parsed_batch.label_dict["click"].numpy())

    def on_metrics(self, trainer, logs):
        self.logs.append(logs)


def test_a_regression_model_trains_and_reports_its_mse(tmp_path, caplog):
    rng = np.random.default_rng(3)
    rows = [f"{2.5 * x + 1:.3f},1,{i % 7},{x:.3f}" for i, x in enumerate(rng.normal(0, 1, 500))]
    rows[10] = "nan,1,1,0.5"  # a regression label must be finite
    path = tmp_path / "data.csv"
    path.write_text("\n".join(rows) + "\n")
    config = _config(tmp_path, path=path, loss="loss_type: L2_LOSS")
    seen = _Seen()
    with caplog.at_level(logging.INFO, logger="easyonline.status"):
        summary = OnlineTrainer(config, online=False, callbacks=[seen]).run()
    assert summary.samples == 499 and summary.rejected == 1
    predictions, labels = np.concatenate(seen.predictions), np.concatenate(seen.labels)
    mse = float(np.mean((predictions - labels) ** 2))  # the window (100000) holds every sample
    assert np.isclose(summary.tasks["regression"]["mse"], mse, rtol=1e-6)
    assert summary.auc is None and summary.logloss is None
    assert f"window MSE       {mse:.4f}" in summary.lines()
    line = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step=")][-1]
    assert " mse=" in line and " auc=" not in line and "bad.bad_label=1" in line
    assert seen.logs[-1]["tasks"]["regression"]["mse"] is not None


def _weighted_stream(good: int, every: int):
    """The synthetic stream with I1 as a sample weight (1 or 2), and after every ``every`` good lines one
    with a label of 7 or a weight of -1, in turn."""
    lines, injected = [], collections.Counter()
    source = SyntheticCtrStream().lines(0, good + good // every)
    for i, line in enumerate(source[:good]):
        fields = line.split(b",")
        fields[1] = b"2" if i % 2 else b"1"
        lines.append(b",".join(fields))
        if i % every == every - 1:
            bad = source[good + i // every].split(b",")
            kind = "bad_label" if (i // every) % 2 == 0 else "bad_weight"
            bad[1] = b"1"
            if kind == "bad_label":
                bad[0] = b"7"
            else:
                bad[1] = b"-1"
            lines.append(b",".join(bad))
            injected[kind] += 1
    return lines, injected


def test_bad_labels_and_weights_are_counted_and_dead_lettered_and_the_rest_trains(broker, topic, tmp_path, caplog):
    lines, injected = _weighted_stream(2000, 25)  # 80 bad lines: 40 labels, 40 weights
    broker.create_topic(topic, 2)
    produce(broker.bootstrap, topic, [lines], partitions=2)
    config = online_config(tmp_path / "m", broker.bootstrap, topic, **{
        "data_config.batch_size": 500, "train_config.save_checkpoints_secs": 0,
        "data_config.sample_weight": "I1", "data_config.dead_letter_topic": topic + "_dead"})
    trainer = build_trainer(config, online=False)
    summary = trainer.run()
    assert summary.samples == 2000
    assert {k: v for k, v in trainer.bad_input.counts.items() if v} == {"bad_label": 40, "bad_weight": 40}
    assert dict(injected) == {"bad_label": 40, "bad_weight": 40}
    assert summary.rejected == 80
    consumer = KafkaConsumer(topic + "_dead", bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=30000)
    dead = collections.Counter()
    for record in consumer:
        headers = dict(record.headers)
        assert rejection_kind(headers["reason"].decode()) == headers["kind"].decode()
        dead[headers["kind"].decode()] += 1
        if sum(dead.values()) >= 80:
            break
    consumer.close()
    assert dict(dead) == {"bad_label": 40, "bad_weight": 40}


def test_the_eval_job_reports_a_regression_tasks_mse_and_a_binary_tasks_auc_and_gauc(tmp_path):
    from easyonline.eval.evaluator import Evaluator
    from easyonline.eval.prometheus_metrics import EvalMetrics
    from easyonline.scoring.checkpoint_model import CheckpointModel
    import urllib.request
    rng = np.random.default_rng(5)
    xs = rng.normal(0, 1, 300)
    path = tmp_path / "data.csv"
    path.write_text("\n".join(f"{2 * x:.3f},1,{i % 5},{x:.3f}" for i, x in enumerate(xs)) + "\n")
    config = _config(tmp_path, "reg", path=path, loss="loss_type: L2_LOSS")
    config.file_eval_input.paths.append(str(path))
    checkpoint = OnlineTrainer(config, online=False).run().checkpoint
    result = Evaluator(config, str(tmp_path / "eval")).evaluate(checkpoint)
    scorer = CheckpointModel(config)
    scorer.restore(checkpoint)
    batch = CsvParser(build_feature_specs(config)).parse(path.read_bytes().split(b"\n"))
    predictions = scorer.score_tasks(batch.features)["regression"]
    mse = float(np.mean((predictions - batch.label_dict["click"].numpy()) ** 2))
    assert result.samples == 300 and np.isclose(result.tasks["regression"]["mse"], mse, rtol=1e-5)
    assert result.auc is None and "auc" not in result.tasks["regression"]

    # a binary model: its task's AUC and gauc (by the ids of a) are the top-level figures too
    binary_path = tmp_path / "binary.csv"
    binary_path.write_text("\n".join(f"{int(x > 0)},1,{i % 5},{x:.3f}" for i, x in enumerate(xs)) + "\n")
    binary = _config(tmp_path, "bin", path=binary_path)
    binary.file_eval_input.paths.append(str(binary_path))
    binary.eval_config.metrics_set.add().gauc.uid_field = "a"
    checkpoint = OnlineTrainer(binary, online=False).run().checkpoint
    result = Evaluator(binary, str(tmp_path / "eval_bin")).evaluate(checkpoint)
    assert result.tasks["ctr"]["auc"] == result.auc and result.tasks["ctr"]["gauc"] == result.gauc
    scorer = CheckpointModel(binary)
    scorer.restore(checkpoint)
    batch = CsvParser(build_feature_specs(binary)).parse(binary_path.read_bytes().split(b"\n"))
    probs, labels = scorer.score_tasks(batch.features)["ctr"], batch.label_dict["click"].numpy()
    pos, neg = probs[labels == 1][:, None], probs[labels == 0][None, :]
    auc = float(np.mean((pos > neg) + 0.5 * (pos == neg)))  # every (positive, negative) pair, ties half
    assert abs(result.auc - auc) < 1e-3  # (the AUC of 10000 score buckets)
    assert result.gauc is not None
    endpoint = EvalMetrics(0)
    try:
        endpoint.update(result)
        text = urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}/metrics", timeout=10).read().decode()
    finally:
        endpoint.close()
    assert f'easyonline_eval_task_auc{{task="ctr"}} {result.auc}' in text
    assert f'easyonline_eval_task_gauc{{task="ctr"}} {result.gauc}' in text


def test_a_cluster_trains_a_regression_task_with_sample_weights_and_reports_its_mse(tmp_path):
    """The smallest cluster (one ps, the chief alone) on a file: the weights reach its graph's loss, a bad
    weight is rejected, and the summary and status line show the shared MSE, as one process's."""
    import re
    from easyonline.config.loader import to_text
    from easyonline.tools.local_cluster import LocalCluster
    from tests.conftest import python_env
    rng = np.random.default_rng(11)
    rows = [f"{2.5 * x + 1:.3f},{1 + i % 2},{i % 7},{x:.3f}" for i, x in enumerate(rng.normal(0, 1, 1000))]
    rows[7] = "1,-1,3,0.5"  # a weight must be >= 0
    path = tmp_path / "data.csv"
    path.write_text("\n".join(rows) + "\n")
    config = _config(tmp_path, "cluster", path=path, loss="loss_type: L2_LOSS")
    config.train_config.log_step_count_secs = 0.001  # a status line after every batch (the run may take < 1 s)
    config_path = tmp_path / "cluster.config"
    config_path.write_text(to_text(config))
    with LocalCluster(1, 1, [f"--config={config_path}"], env=python_env()) as cluster:
        assert cluster.wait(300) == 0, cluster.chief_output()[-4000:]
    output = cluster.chief_output()
    summary = output.split("training summary", 1)[1]
    assert re.search(r"samples\s+999\b", summary) and re.search(r"rejected lines\s+1\b", summary), summary
    assert "window AUC" not in summary
    mse = float(re.search(r"window MSE\s+(\S+)", summary).group(1))
    assert re.search(r"step=\d+ .* mse=\d+\.\d{4} keys=", output), output[-3000:]
    # one process on the same lines: the same model and steps, so about the same pre-update MSE
    config.model_dir = str(tmp_path / "single")
    single = OnlineTrainer(config, online=False).run()
    assert single.samples == 999 and abs(mse - single.tasks["regression"]["mse"]) < 0.1 * mse, (mse, single.tasks)
