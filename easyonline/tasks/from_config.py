"""Builds a model's tasks from its config: EasyRec's task towers, or the one task of a single-task model.

A multi-task model lists its towers (``TaskTower`` / ``BayesTaskTower``:
tower_name, label_name, loss_type or losses, weight); a single-task model
has one task of ``model_config.loss_type`` (or ``model_config.losses``) on
the first label field. A tower without a label_name takes the label field of
its position, as in EasyRec. ``losses`` (tasks/losses/terms.py) replace
loss_type: the task's loss is sum(weight_i * loss_i), and their kind
(binary or regression, features/label_kinds.py) is the task's.
"""
from typing import Any, Dict, Sequence, Union

from easyonline.core.errors import ConfigError
from easyonline.features.label_kinds import BINARY, BINARY_LOSSES, REGRESSION_LOSSES, task_kind
from easyonline.protos import pipeline_pb2
from easyonline.tasks.losses.terms import LossTerm, loss_term
from easyonline.tasks.ranking import RankingTask
from easyonline.tasks.regression import RegressionTask
from easyonline.tasks.task import Task

Tower = Union[pipeline_pb2.TaskTower, pipeline_pb2.BayesTaskTower]
LossType = pipeline_pb2.LossType


def make_task(loss_type: int, num_class: int, path: str, window_samples: int, label_name: str, name: str,
              weight: float = 1.0, use_sample_weight: bool = True, times_label: str = "",
              losses: Sequence[pipeline_pb2.Loss] = ()) -> Task:
    """The task of ``losses`` when given, else of ``loss_type`` (``path`` names the config field in errors)."""
    settings: Dict[str, Any] = dict(label_name=label_name, name=name, weight=weight,
                                    use_sample_weight=use_sample_weight, times_label=times_label)
    if losses:
        terms = [loss_term(loss, f"{path}.losses[{i}]") for i, loss in enumerate(losses)]
        _check_terms(terms, num_class, path)
        task_class = RankingTask if terms[0].kind == BINARY else RegressionTask
        return task_class(window_samples, terms=terms, **settings)
    if num_class != 1:
        raise ConfigError(f"{path}.num_class", f"only 1 (one output per sample and task) is supported, got "
                          f"{num_class} (2 with losses of JRC_LOSS)")
    if loss_type in BINARY_LOSSES:
        return RankingTask(window_samples, **settings)
    if loss_type in REGRESSION_LOSSES:
        return RegressionTask(window_samples, **settings)
    supported = [LossType.Name(t) for t in BINARY_LOSSES + REGRESSION_LOSSES]
    raise ConfigError(f"{path}.loss_type", f"{LossType.Name(loss_type)} is not supported; use one of {supported} "
                      f"(or {path}.losses for the others)")


def _check_terms(terms: Sequence[LossTerm], num_class: int, path: str) -> None:
    """One kind of loss per task, and as many logits per sample as every loss takes."""
    kinds = sorted({term.kind for term in terms})
    if len(kinds) > 1:
        raise ConfigError(f"{path}.losses", f"mixes kinds {kinds}: a task's losses are all binary (0/1 label, "
                          "probabilities) or all L2_LOSS (a regression)")
    classes = sorted({term.num_class for term in terms})
    if len(classes) > 1:
        raise ConfigError(f"{path}.losses", "JRC_LOSS takes two logits per sample and cannot be combined with "
                          "losses of one logit in a task")
    if num_class != classes[0]:
        raise ConfigError(f"{path}.num_class", f"must be {classes[0]} for losses "
                          f"{[term.name for term in terms]}, got {num_class}")


def tasks_from_towers(towers: Sequence[Tower], label_fields: Sequence[str], window_samples: int,
                      path: str) -> list:
    """One task per tower, in order (``path``: the towers' config field, e.g. ``model_config.dbmtl.task_towers``)."""
    return [tower_task(tower, i, label_fields, window_samples, f"{path}[{i}]") for i, tower in enumerate(towers)]


def tower_task(tower: Tower, position: int, label_fields: Sequence[str], window_samples: int, where: str,
               **overrides: Any) -> Task:
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
                    use_sample_weight=tower.use_sample_weight, losses=list(tower.losses))
    settings.update(overrides)
    return make_task(tower.loss_type, tower.num_class, where, window_samples, **settings)


def single_task(model_config: pipeline_pb2.ModelConfig, label_fields: Sequence[str], window_samples: int) -> Task:
    """The one task of a single-task model: ``model_config.loss_type`` (or ``losses``) on the first label
    field. Its models give one logit per sample, so JRC_LOSS (two) is a task tower's only."""
    label = label_fields[0] if label_fields else "label"
    for i, loss in enumerate(model_config.losses):
        if loss.loss_type == LossType.JRC_LOSS:
            raise ConfigError(f"model_config.losses[{i}].loss_type", "JRC_LOSS needs two logits per sample: it is "
                              "supported in a task tower (num_class: 2) of MMoE or DBMTL")
    name = "ctr" if task_kind(model_config.loss_type, model_config.losses) == BINARY else "regression"
    return make_task(model_config.loss_type, model_config.num_class, "model_config", window_samples, label, name,
                     losses=list(model_config.losses))
