"""The task contract: what one of a model's objectives is (TFRS's tasks layer, EasyRec's towers).

A model owns its tasks (``models/ranking_model.py`` ``RankingModel.tasks``)
and its ``compute_loss`` sums their weighted losses; the training loop knows
none of them by kind. Each task names the label it learns from (a
``data_config.label_fields`` entry: the parser hands labels over as a dict
by name), its loss, its weight in the model's loss, its prequential metrics
(scored before each update) and its prediction outputs.
"""
from typing import Any, Dict, Iterator, Protocol, Sequence, Tuple

import numpy as np

from easyonline.core.metrics import PrequentialMetrics


class Task(Protocol):
    """One objective of a model."""

    name: str  # names its outputs (``probs_<name>`` for a second task on; the first's are ``probs``/``logits``)
    label_name: str  # the label field it learns from
    weight: float  # its share of the model's loss
    metrics: PrequentialMetrics  # windowed, scored before each update

    def loss(self, labels: Any, logits: Any) -> Any:
        """The batch's mean loss (a scalar tensor), without regularization (the model adds that once)."""

    def outputs(self, logits: Any) -> Dict[str, Any]:
        """Its prediction outputs by name, as tensors (in the graph: serving and scoring read them)."""

    def probabilities(self, logits: Any) -> np.ndarray:
        """The scores its metrics take, as numpy."""

    def update_metrics(self, labels: np.ndarray, probabilities: np.ndarray) -> None:
        """Adds a batch scored before it was trained on."""


class Tasks:
    """A model's tasks in order; the first is the primary one (the status line's metrics, the id statistics'
    clicks). A plain object, not a list, so that Keras does not track it (tasks hold no variables and the
    checkpoint stays as it was)."""

    def __init__(self, tasks: Sequence[Task]):
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
    def label_names(self) -> Tuple[str, ...]:
        """The labels the tasks learn from, each once, in order."""
        return tuple(dict.fromkeys(t.label_name for t in self._tasks))
