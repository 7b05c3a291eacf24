"""Builds a model's tasks from its config: EasyRec's task towers, or the one task of a single-task model.

A multi-task model lists its towers (``TaskTower`` / ``BayesTaskTower``:
tower_name, label_name, loss_type, weight); a single-task model has one task
of ``model_config.loss_type`` on the first label field. A tower without a
label_name takes the label field of its position, as in EasyRec.
"""
from typing import Sequence, Union

from easyonline.core.errors import ConfigError
from easyonline.protos import pipeline_pb2
from easyonline.tasks.ranking import RankingTask
from easyonline.tasks.regression import RegressionTask
from easyonline.tasks.task import Task

Tower = Union[pipeline_pb2.TaskTower, pipeline_pb2.BayesTaskTower]
LossType = pipeline_pb2.LossType
BINARY_LOSSES = (LossType.CLASSIFICATION, LossType.BINARY_CROSS_ENTROPY_LOSS)
REGRESSION_LOSSES = (LossType.L2_LOSS,)


def make_task(loss_type: int, num_class: int, path: str, window_samples: int, label_name: str, name: str,
              weight: float = 1.0, use_sample_weight: bool = True, times_label: str = "") -> Task:
    """The task of ``loss_type`` (``path`` names the config field in errors)."""
    if num_class != 1:
        raise ConfigError(f"{path}.num_class", f"only 1 (one output per sample and task) is supported, got {num_class}")
    if loss_type in BINARY_LOSSES:
        return RankingTask(window_samples, label_name=label_name, name=name, weight=weight,
                           use_sample_weight=use_sample_weight, times_label=times_label)
    if loss_type in REGRESSION_LOSSES:
        return RegressionTask(window_samples, label_name=label_name, name=name, weight=weight,
                              use_sample_weight=use_sample_weight, times_label=times_label)
    supported = [LossType.Name(t) for t in BINARY_LOSSES + REGRESSION_LOSSES]
    raise ConfigError(f"{path}.loss_type", f"{LossType.Name(loss_type)} is not supported; use one of {supported}")


def tasks_from_towers(towers: Sequence[Tower], label_fields: Sequence[str], window_samples: int,
                      path: str) -> list:
    """One task per tower, in order (``path``: the towers' config field, e.g. ``model_config.dbmtl.task_towers``)."""
    return [tower_task(tower, i, label_fields, window_samples, f"{path}[{i}]") for i, tower in enumerate(towers)]


def tower_task(tower: Tower, position: int, label_fields: Sequence[str], window_samples: int, where: str,
               **overrides) -> Task:
    """The task of one tower (``where``: its config field; ``position``: its place among the model's towers,
    whose label field it learns from when it names none). ``overrides``: make_task's arguments to change
    (name, weight, times_label)."""
    if not tower.tower_name:
        raise ConfigError(f"{where}.tower_name", "every task tower needs a name (it names the task's outputs)")
    label = tower.label_name or (label_fields[position] if position < len(label_fields) else "")
    if not label:
        raise ConfigError(f"{where}.label_name", f"tower {tower.tower_name!r} names no label and "
                          f"data_config.label_fields has no entry {position} to default to")
    if label not in label_fields:
        raise ConfigError(f"{where}.label_name", f"{label!r} is not a data_config.label_fields entry "
                          f"(label_fields: {list(label_fields)})")
    settings = dict(label_name=label, name=tower.tower_name, weight=tower.weight,
                    use_sample_weight=tower.use_sample_weight)
    settings.update(overrides)
    return make_task(tower.loss_type, tower.num_class, where, window_samples, **settings)


def single_task(model_config: pipeline_pb2.ModelConfig, label_fields: Sequence[str], window_samples: int) -> Task:
    """The one task of a single-task model: ``model_config.loss_type`` on the first label field."""
    label = label_fields[0] if label_fields else "label"
    name = "regression" if model_config.loss_type in REGRESSION_LOSSES else "ctr"
    return make_task(model_config.loss_type, model_config.num_class, "model_config", window_samples, label, name)
