"""The regression task (tasks/regression.py): its L2 loss, outputs and windowed MSE, by hand."""
import numpy as np
import pytest

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.errors import ConfigError
from easyonline.protos import pipeline_pb2
from easyonline.tasks import RankingTask, RegressionTask, Tasks
from easyonline.tasks.from_config import tasks_from_towers

tf = ensure_legacy_keras()


def test_loss_is_the_mean_squared_error_weighted_by_the_samples():
    task = RegressionTask(label_name="rating", name="rating")
    labels, predictions = tf.constant([4.0, 1.0, 3.0]), tf.constant([3.0, 3.0, 3.0])
    # errors 1, 2, 0: (1 + 4 + 0) / 3
    assert float(task.loss(labels, predictions)) == pytest.approx(5 / 3, rel=1e-6)
    # weights 1, 0.5, 2: (1 + 0.5 * 4 + 0) / 3 samples with a weight
    assert float(task.loss(labels, predictions, tf.constant([1.0, 0.5, 2.0]))) == pytest.approx(1.0, rel=1e-6)


def test_outputs_are_the_value_itself_named_y():
    task = RegressionTask(name="watch_time")
    outputs = task.outputs(tf.constant([2.5, -1.0]), "_watch_time")
    assert list(outputs) == ["y_watch_time"]
    np.testing.assert_allclose(outputs["y_watch_time"].numpy(), [2.5, -1.0])
    assert list(task.outputs(tf.constant([1.0]))) == ["y"]


def test_windowed_mse_drops_the_oldest_batches():
    task = RegressionTask(window_samples=4)
    assert task.metrics.mse() is None
    task.update_metrics(np.array([1.0, 2.0]), np.array([1.0, 4.0]))  # squared errors 0, 4
    assert task.metrics.mse() == pytest.approx(2.0) and task.metrics.label_mean() == pytest.approx(1.5)
    task.update_metrics(np.array([0.0, 0.0]), np.array([1.0, 1.0]))  # 1, 1: window of 4 = (0 + 4 + 1 + 1) / 4
    assert task.metrics.mse() == pytest.approx(1.5)
    # a batch leaves only once the window stays full without it (as the AUC's window)
    task.update_metrics(np.array([3.0]), np.array([3.0]))  # 0: (0 + 4 + 1 + 1 + 0) / 5
    assert task.metrics.figures() == {"mse": pytest.approx(1.2), "label_mean": pytest.approx(1.2)}
    task.update_metrics(np.array([2.0, 2.0]), np.array([2.0, 2.0]))  # 0, 0; the first batch leaves: 2 / 5
    assert task.metrics.figures() == {"mse": pytest.approx(0.4), "label_mean": pytest.approx(1.4)}


def test_towers_make_tasks_of_their_loss_type_with_labels_by_position():
    towers = [pipeline_pb2.TaskTower(tower_name="liked"),
              pipeline_pb2.TaskTower(tower_name="rating", loss_type=pipeline_pb2.L2_LOSS, weight=0.5)]
    tasks = Tasks(tasks_from_towers(towers, ("liked", "rating"), 100, "model_config.mmoe.task_towers"))
    assert [(t.kind, t.name, t.label_name, t.weight) for t in tasks] == [
        ("binary", "liked", "liked", 1.0), ("regression", "rating", "rating", 0.5)]
    assert isinstance(tasks[0], RankingTask) and tasks.output_suffix(tasks[1]) == "_rating"
    with pytest.raises(ConfigError) as raised:
        tasks_from_towers([pipeline_pb2.TaskTower(tower_name="x", loss_type=pipeline_pb2.JRC_LOSS)], ("a",), 1,
                          "model_config.mmoe.task_towers")
    assert raised.value.path == "model_config.mmoe.task_towers[0].loss_type" and "JRC_LOSS" in str(raised.value)
    with pytest.raises(ConfigError, match="label_fields has no entry 1"):
        tasks_from_towers(towers, ("liked",), 1, "model_config.mmoe.task_towers")
