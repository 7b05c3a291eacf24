"""The model owns its tasks (tasks/task.py, ``RankingModel.compute_loss``): labels by name from the parser to
the loss, each task's weighted loss on its own label, checked by hand."""
import math

import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()

import numpy as np
import pytest

from easyonline.config import parse_pipeline_config
from easyonline.config.validate import validate_pipeline_config
from easyonline.core.errors import ConfigError
from easyonline.features import CsvParser
from easyonline.features.feature_spec import build_feature_specs
from easyonline.models.builder import build_model
from easyonline.models.dnn import DNN
from easyonline.tasks import RankingTask, Tasks
from easyonline.train.trainer import check_task_labels

# Two labels (click, buy), one id feature; the first label field is the primary task's.
_CONFIG = """
model_dir: "/tmp/unused"
file_train_input { paths: "unused.csv" }
data_config {
  input_fields { input_name: "click" input_type: INT32 }
  input_fields { input_name: "buy" input_type: FLOAT }
  input_fields { input_name: "a" input_type: INT64 }
  label_fields: "click"
  label_fields: "buy"
  separator: ","
}
feature_configs { input_names: "a" embedding_dim: 2 }
model_config { model_class: "dnn" dnn { dnn { hidden_units: [2] } } }
train_config { metrics_window_samples: 500 }
"""


def _config():
    config = parse_pipeline_config(_CONFIG)
    validate_pipeline_config(config)
    return config


def _xent(labels, logits):
    p = 1 / (1 + np.exp(-np.asarray(logits, np.float64)))
    y = np.asarray(labels, np.float64)
    return float(np.mean(-(y * np.log(p) + (1 - y) * np.log(1 - p))))


def test_the_parser_hands_every_label_over_by_name():
    config = _config()
    batch = CsvParser(build_feature_specs(config)).parse([b"1,0,7", b"0,1,8"])
    assert set(batch.label_dict) == {"click", "buy"}
    np.testing.assert_array_equal(batch.label_dict["click"].numpy(), [1.0, 0.0])
    np.testing.assert_array_equal(batch.label_dict["buy"].numpy(), [0.0, 1.0])
    np.testing.assert_array_equal(batch.labels.numpy(), [1.0, 0.0])  # the first label, as callbacks read it
    assert batch.labels_by_name("click") is batch.label_dict


def test_built_model_owns_one_ranking_task_on_the_first_label():
    config = _config()
    model = build_model(config, build_feature_specs(config))
    assert len(model.tasks) == 1
    task = model.tasks.primary
    assert task.label_name == "click" and task.weight == 1.0 and task.metrics.window_samples == 500
    assert model.tasks.label_names == ("click",)


def test_compute_loss_sums_each_tasks_weighted_loss_on_its_own_label():
    config = _config()
    specs = build_feature_specs(config)
    tasks = Tasks([RankingTask(label_name="click", name="ctr"), RankingTask(label_name="buy", name="cvr", weight=0.5)])
    model = DNN(specs, config.model_config, config.model_config.dnn.dnn, seed=1, name="dnn", tasks=tasks)
    features = {"a": tf.constant([7, 8], tf.int64)}
    click, buy = tf.constant([1.0, 0.0]), tf.constant([0.0, 1.0])
    loss, by_task = model.compute_loss(features, {"click": click, "buy": buy}, training=False)
    assert set(by_task) == {"ctr", "cvr"}
    logits = by_task["ctr"]  # this single-logit model serves both tasks with it
    expected = _xent(click, logits) + 0.5 * _xent(buy, logits)
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert not math.isclose(expected, _xent(click, logits) + _xent(buy, logits))  # the weight counts
    with pytest.raises(KeyError):
        model.compute_loss(features, {"click": click}, training=False)  # a task's label is missing


def test_a_tasks_label_must_be_a_label_field():
    assert check_task_labels(("click",), ("click", "buy")) == ("click",)
    with pytest.raises(ConfigError, match="label_fields") as raised:
        check_task_labels(("conversion",), ("click", "buy"))
    assert "conversion" in str(raised.value)


def test_task_names_must_differ():
    with pytest.raises(ValueError, match="differ"):
        Tasks([RankingTask(label_name="click"), RankingTask(label_name="buy")])
