"""ESMM's CTCVR task is scored against conversion x click everywhere (issue 51, finding 7).

A stream where conversions (``buy``) also happen without a click: the single process's prequential figures,
eval's figures of the trained checkpoint and the cluster's shared metrics (one step of the cluster graph on a
real in-process ps) all score ``ctcvr`` against ``clk * buy``; the figures against ``buy`` alone differ.
"""
import numpy as np
import pytest
import tensorflow as tf

from easyonline.core.metrics import PrequentialMetrics
from easyonline.distributed.cluster_config import ClusterConfig
from easyonline.distributed.shared_state import ClusterMetrics
from easyonline.distributed.train_graph import TrainGraph
from easyonline.eval.evaluator import Evaluator
from easyonline.features import build_feature_specs
from easyonline.inputs.build_source import build_source
from easyonline.jobs.online_train import build_trainer
from easyonline.scoring.checkpoint_model import CheckpointModel
from easyonline.tools.stream_producer import SyntheticCtrStream
from easyonline.utils.net import free_port
from tests.integration.test_multi_task_models import ESMM, GROUPS, config_for

SAMPLES = 2000


def lines_with_unclicked_buys(start: int, count: int):
    """clk,buy,I1,I2,I3,C1..C6: buy on a third of C1's ids, after a click or (on even C2 ids) without one."""
    clk, numerics, cats = SyntheticCtrStream(informative=6, base_vocab=50).arrays(start, count)
    buy = ((cats[:, 0] % 3 == 0) & ((clk == 1) | (cats[:, 1] % 2 == 0))).astype(np.int64)
    return [",".join([str(c), str(b)] + [f"{v:g}" for v in n[:3]] + [str(i) for i in ids[:6]]).encode()
            for c, b, n, ids in zip(clk, buy, numerics, cats)]


def _labels(lines):
    columns = np.array([[int(v) for v in line.split(b",")[:2]] for line in lines], np.float64)
    return columns[:, 0], columns[:, 1]


def _config(tmp_path):
    data = tmp_path / "samples.csv"
    data.write_bytes(b"\n".join(lines_with_unclicked_buys(0, SAMPLES)) + b"\n")
    config = config_for(ESMM, tmp_path / "model", GROUPS)
    config.ClearField("kafka_train_input")
    config.file_train_input.paths.append(str(data))
    config.train_config.metrics_window_samples = 10 * SAMPLES  # every sample in the window
    return config


def _auc(labels, probs) -> float:
    metrics = PrequentialMetrics(len(labels))
    metrics.update(labels, probs)
    return metrics.auc()


def test_single_process_and_eval_score_ctcvr_against_conversion_times_click(tmp_path):
    config = _config(tmp_path)
    clk, buy = _labels(lines_with_unclicked_buys(0, SAMPLES))
    target = clk * buy
    assert (buy * (1 - clk)).sum() > 50 and target.sum() > 50  # conversions without a click, and with one

    trainer = build_trainer(config, online=False)
    summary = trainer.run()
    assert summary.samples == SAMPLES
    trained = summary.tasks["ctcvr"]
    assert trained["ctr"] == pytest.approx(target.mean()) and trained["ctr"] != pytest.approx(buy.mean())

    result = Evaluator(config, str(tmp_path / "eval"), make_source=lambda: build_source(config, trainer.specs, {})) \
        .evaluate(summary.checkpoint)
    assert result.samples == SAMPLES
    scored = CheckpointModel(config)
    scored.restore(summary.checkpoint)
    parsed = trainer.parser.parse(lines_with_unclicked_buys(0, SAMPLES))
    probs = np.asarray(scored.score_tasks(parsed.features)["ctcvr"])
    evaluated = result.tasks["ctcvr"]
    assert evaluated["ctr"] == pytest.approx(target.mean()) and evaluated["ctr"] != pytest.approx(buy.mean())
    assert evaluated["auc"] == pytest.approx(_auc(target, probs), abs=1e-6)
    assert abs(_auc(buy, probs) - evaluated["auc"]) > 1e-3  # against buy alone, another figure
    assert result.tasks["cvr"]["ctr"] == pytest.approx(buy.mean())  # CVR's own label is buy


def test_the_cluster_graphs_shared_metrics_score_ctcvr_against_conversion_times_click(tmp_path):
    """One step of the cluster's graph on an in-process ps and chief: the shared sums of ``ctcvr`` hold the
    batch's clk * buy and the logloss of its pre-update predictions against it."""
    config = _config(tmp_path)
    lines = lines_with_unclicked_buys(0, 500)
    clk, buy = _labels(lines)
    target = clk * buy
    addresses = {"chief": [f"127.0.0.1:{free_port()}"], "ps": [f"127.0.0.1:{free_port()}"]}
    cluster = ClusterConfig({**addresses, "worker": []}, "chief", 0)
    spec = tf.train.ClusterSpec(addresses)
    servers = [tf.distribute.Server(spec, job_name=job, task_index=0, start=True) for job in ("ps", "chief")]
    specs = build_feature_specs(config)
    graph = TrainGraph(config, specs, cluster)
    trainer = build_trainer(config, online=False)  # (its parser: the batch as the cluster trainer parses it)
    parsed = trainer.parser.parse(lines)
    labels = parsed.labels_by_name(specs.label_names[0])
    with tf.compat.v1.Session(servers[1].target, graph=graph.graph) as session:
        session.run([graph.global_init, graph.local_init])
        graph.positions.bind(session.run)
        feed = graph.feed(parsed.host_features(), {name: labels[name] for name in graph.label_names}, 0.0,
                          {0: len(lines)}, 0)
        out = session.run({"step": graph.train_op, "predictions": graph.predictions}, feed)
        metrics = ClusterMetrics(session.run, graph.state, 10 * len(lines))
        metrics.refresh()
        figures = metrics.task_figures()
    probs = np.clip(out["predictions"]["ctcvr"].astype(np.float64), 1e-7, 1 - 1e-7)
    logloss = -np.mean(target * np.log(probs) + (1 - target) * np.log(1 - probs))
    assert figures["ctcvr"]["ctr"] == pytest.approx(target.mean()) and target.mean() != pytest.approx(buy.mean())
    assert figures["ctcvr"]["logloss"] == pytest.approx(logloss, rel=1e-4)
    assert figures["cvr"]["ctr"] == pytest.approx(buy.mean())
