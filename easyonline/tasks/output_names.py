"""Which of a task's outputs is its prediction, by EasyRec's names: ``probs`` for a binary task, ``y`` for a
regression, ``probs_<tower>`` / ``y_<tower>`` in a multi-task model.

Serving returns every output (``Model.task_outputs``: the logits too); the predict job writes these
columns, one per task, and serving's own scoring (an export's ``score_features``, a checkpoint's ``score``)
reads the primary task's.
"""
from typing import List

from easyonline.tasks.task import Tasks

PREDICTION_OUTPUT = {"binary": "probs", "regression": "y"}


def prediction_names(tasks: Tasks) -> List[str]:
    """Each task's prediction output name, in task order (the primary task's first)."""
    return [PREDICTION_OUTPUT[task.kind] + tasks.output_suffix(task) for task in tasks]
