"""The task contract: what one of a model's objectives is (TFRS's tasks layer, EasyRec's towers).

A model owns its tasks (``models/base.py`` ``Model.tasks``)
and its ``compute_loss`` sums their weighted losses; the training loop knows
none of them by kind. Each task names the label it learns from (a
``data_config.label_fields`` entry: the parser hands labels over as a dict
by name), its loss, its weight in the model's loss, its prequential metrics
(scored before each update) and its prediction outputs.
"""
from typing import Any, Dict, Iterator, Mapping, Optional, Protocol, Sequence, Tuple

import numpy as np

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.metrics import TaskMetrics

tf = ensure_legacy_keras()


class Task(Protocol):
    """One objective of a model."""

    kind: str  # "binary" (tasks/ranking.py) or "regression" (tasks/regression.py)
    name: str  # EasyRec's tower_name: names its outputs (``probs_<name>``, ``y_<name>``) in a multi-task model
    label_name: str  # the label field it learns from
    # another label field its target is multiplied by ("" none): ESMM's CTCVR task learns conversion * click
    # over every impression (models/esmm.py); read through ``task_label``
    times_label: str
    weight: float  # its share of the model's loss
    use_sample_weight: bool  # whether data_config.sample_weight weighs its loss
    num_class: int  # logits per sample (2: a JRC_LOSS task's two classes; else 1)

    @property
    def metrics(self) -> TaskMetrics:
        """Windowed, scored before each update."""

    def loss(self, labels: Any, logits: Any, sample_weight: Optional[Any] = None,
             features: Optional[Mapping[str, Any]] = None) -> Any:
        """The batch's loss, a scalar tensor, without regularization (the model adds that once): the weighted
        sum of its loss terms (tasks/losses/), each (weighted) over the batch. ``features``: the batch's, by
        name, for the losses over sessions."""

    def scores(self, logits: Any) -> Any:
        """Its prediction from its logits, as a tensor (a probability, or the predicted value)."""

    def outputs(self, logits: Any, suffix: str = "") -> Dict[str, Any]:
        """Its prediction outputs by name (``suffix`` is ``_<name>`` in a multi-task model), as tensors."""

    def predictions(self, logits: Any) -> np.ndarray:
        """What its metrics take (a probability, or the predicted value), as numpy."""

    def update_metrics(self, labels: np.ndarray, predictions: np.ndarray) -> None:
        """Adds a batch scored before it was trained on."""


def task_label(task: "Task", labels: Mapping[str, Any]) -> Any:
    """The target of ``task`` from a batch's labels by name (tensors or numpy): its label, times its
    ``times_label`` when it has one."""
    label = labels[task.label_name]
    return label * labels[task.times_label] if task.times_label else label


class Tasks:
    """A model's tasks in order; the first is the primary one (the status line's metrics, the id statistics'
    clicks). A plain object, not a list, so that Keras does not track it (tasks hold no variables and the
    checkpoint stays as it was)."""

    def __init__(self, tasks: Sequence[Task]) -> None:
        if not tasks:
            raise ValueError("a model needs at least one task")
        names = [t.name for t in tasks]
        if len(set(names)) != len(names):
            raise ValueError(f"task names must differ, got {names}")
        self._tasks: Tuple[Task, ...] = tuple(tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks)

    def __len__(self) -> int:
        return len(self._tasks)

    def __getitem__(self, index: int) -> Task:
        return self._tasks[index]

    @property
    def primary(self) -> Task:
        return self._tasks[0]

    @property
    def single(self) -> bool:
        """One task: its outputs carry no suffix (``probs``, ``y``), as EasyRec's single-task models'."""
        return len(self._tasks) == 1

    def output_suffix(self, task: Task) -> str:
        """``""`` for a single task, else ``_<tower name>``."""
        return "" if self.single else f"_{task.name}"

    def targets(self, labels: Mapping[str, Any]) -> Dict[str, Any]:
        """Each task's target by task name, from a batch's labels by name (tensors or numpy): what its loss
        learns and its metrics score against (``task_label``: ESMM's CTCVR, conversion x click). The one
        definition the engines' steps, the cluster's shared metrics and eval use."""
        return {task.name: task_label(task, labels) for task in self._tasks}

    @property
    def label_names(self) -> Tuple[str, ...]:
        """The labels the tasks learn from (their ``times_label`` too), each once, in order."""
        return tuple(dict.fromkeys(name for t in self._tasks for name in (t.label_name, t.times_label) if name))
