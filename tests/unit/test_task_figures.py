"""Every task's figures in the status line, TensorBoard, the summary and /metrics, against hand-computed values."""
import glob
import logging
import urllib.request

import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()

import numpy as np

from easyonline.tasks import RankingTask
from easyonline.tasks.regression import RegressionTask
from easyonline.train.prometheus_metrics import PrometheusMetrics
from easyonline.train.status import StatusReporter
from easyonline.train.task_figures import line_text, scalars
from easyonline.train.trainer import TrainSummary


def _figures():
    ctr = RankingTask(label_name="click", name="ctr")
    # positives scored 0.9 and 0.4, negatives 0.2 and 0.6: 3 of the 4 pairs ordered right, AUC 0.75
    ctr.update_metrics(np.array([1, 0, 1, 0]), np.array([0.9, 0.2, 0.4, 0.6]))
    rating = RegressionTask(label_name="rating", name="rating")
    # squared errors 0.25, 0, 1: MSE 1.25 / 3 = 0.41667; mean label 2
    rating.update_metrics(np.array([1.0, 2.0, 3.0]), np.array([1.5, 2.0, 2.0]))
    return {"ctr": ctr.metrics.figures(), "rating": rating.metrics.figures()}


def test_the_figures_by_hand():
    tasks = _figures()
    assert tasks["ctr"]["auc"] == 0.75 and tasks["ctr"]["ctr"] == 0.5
    # logloss: -(ln .9 + ln .8 + ln .4 + ln .4) / 4
    assert np.isclose(tasks["ctr"]["logloss"], -(np.log(0.9) + np.log(0.8) + 2 * np.log(0.4)) / 4)
    assert np.isclose(tasks["rating"]["mse"], 1.25 / 3) and tasks["rating"]["label_mean"] == 2.0


def test_status_fields_one_binary_task_one_regression_task_and_several():
    tasks = _figures()
    logloss = -(np.log(0.9) + np.log(0.8) + 2 * np.log(0.4)) / 4
    assert line_text({"ctr": tasks["ctr"]}) == f"auc=0.7500 logloss={logloss:.4f} ctr=0.5000"  # unchanged
    assert line_text({"rating": tasks["rating"]}) == "mse=0.4167"
    assert line_text(tasks) == "auc_ctr=0.7500 mse_rating=0.4167"
    assert scalars(tasks) == {"prequential_auc/ctr": 0.75, "prequential_logloss/ctr": tasks["ctr"]["logloss"],
                              "prequential_mse/rating": tasks["rating"]["mse"]}
    assert set(scalars({"ctr": tasks["ctr"]})) == {"prequential_auc", "prequential_logloss"}


def test_the_status_line_and_tensorboard_show_every_task(tmp_path, caplog):
    tasks = _figures()
    reporter = StatusReporter(10, str(tmp_path / "train"))
    with caplog.at_level(logging.INFO, logger="easyonline.status"):
        logs = reporter.report(3, 7, 0, 0.75, 0.5, 0.5, {"t": 4}, 0, tasks=tasks)
    reporter.close()
    line = caplog.records[-1].getMessage()
    assert " auc_ctr=0.7500 mse_rating=0.4167 keys=4 " in line and " auc=" not in line
    assert logs["tasks"] == tasks
    tags = {}
    for path in glob.glob(str(tmp_path / "train" / "events.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                tags[value.tag] = float(tf.make_ndarray(value.tensor))
    assert np.isclose(tags["prequential_auc/ctr"], 0.75) and np.isclose(tags["prequential_mse/rating"], 1.25 / 3)
    assert "prequential_auc" not in tags


def test_the_summary_has_a_line_per_task_figure():
    tasks = _figures()
    summary = TrainSummary(3, 7, 1.0, 7.0, 0.75, tasks["ctr"]["logloss"], 0, {}, {}, None, "input ended", tasks=tasks)
    lines = summary.lines()
    assert "window AUC [ctr] 0.7500" in lines and "window MSE [rating] 0.4167" in lines
    assert not any(line.startswith("window AUC  ") for line in lines)
    single = TrainSummary(3, 7, 1.0, 7.0, 0.75, 0.5, 0, {}, {}, None, "input ended", tasks={"ctr": tasks["ctr"]})
    assert "window AUC       0.7500" in single.lines()  # a single binary task's summary as before


def test_metrics_endpoint_has_every_tasks_figures_with_a_task_label(tmp_path):
    tasks = _figures()
    logs = StatusReporter(10).report(3, 7, 0, 0.75, tasks["ctr"]["logloss"], 0.5, {"t": 4}, 0, tasks=tasks)
    prometheus = PrometheusMetrics(0)
    try:
        prometheus.on_metrics(None, logs)
        text = urllib.request.urlopen(f"http://127.0.0.1:{prometheus.port}/metrics", timeout=10).read().decode()
    finally:
        prometheus.on_train_end(None, None)
    assert 'easyonline_trainer_task_auc{task="ctr"} 0.75' in text
    assert 'easyonline_trainer_task_ctr{task="ctr"} 0.5' in text
    assert 'easyonline_trainer_task_mse{task="rating"} 0.41666' in text
    assert 'easyonline_trainer_task_label_mean{task="rating"} 2.0' in text
    assert 'easyonline_trainer_task_auc{task="rating"}' not in text
    assert "easyonline_trainer_auc 0.75" in text  # the primary task's, unlabelled, as before
