"""Every task's windowed figures, named for the status line, TensorBoard and the summary.

A model with one binary task keeps today's names (``auc``, ``logloss``,
``ctr``); one regression task shows ``mse``; a model with several tasks
names each figure after its task (``auc_ctr``, ``mse_rating``), because the
same figure of two tasks must not share a name. A task's kind is read from
its figures (``auc`` for binary, ``mse`` for regression), so a cluster's
shared metrics and a process's own are named alike.
"""
from typing import Dict, List, Optional, Tuple

# {task name: {figure name: value or None}}, in the model's task order (the first is the primary)
TaskFigures = Dict[str, Dict[str, Optional[float]]]

#: the figures the status line shows of a task, by kind: binary tasks' AUC, regression tasks' MSE
_LINE = {"auc": ("auc",), "mse": ("mse",)}


def _fmt(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.4f}"


def is_binary(figures: Dict[str, Optional[float]]) -> bool:
    return "auc" in figures


def line_fields(tasks: TaskFigures) -> List[Tuple[str, Optional[float]]]:
    """The status line's metric fields in order: ``auc logloss ctr`` of a single binary task, ``mse`` of a
    single regression task, else ``auc_<task>`` / ``mse_<task>`` of each task."""
    if len(tasks) == 1:
        figures = next(iter(tasks.values()))
        names = ("auc", "logloss", "ctr") if is_binary(figures) else ("mse",)
        return [(name, figures.get(name)) for name in names]
    return [(f"{key}_{task}", figures.get(key)) for task, figures in tasks.items()
            for key in (("auc",) if is_binary(figures) else ("mse",))]


def line_text(tasks: TaskFigures) -> str:
    return " ".join(f"{name}={_fmt(value)}" for name, value in line_fields(tasks))


def scalars(tasks: TaskFigures) -> Dict[str, float]:
    """TensorBoard scalars: ``prequential_auc`` etc. of a single task, ``prequential_auc/<task>`` of several."""
    out: Dict[str, float] = {}
    for task, figures in tasks.items():
        for key in (("auc", "logloss") if is_binary(figures) else ("mse",)):
            value = figures.get(key)
            if value is not None:
                out[f"prequential_{key}" if len(tasks) == 1 else f"prequential_{key}/{task}"] = value
    return out


def summary_lines(tasks: TaskFigures) -> List[str]:
    """The summary's lines of a model with several tasks (or one regression task): window figures per task."""
    lines = []
    for task, figures in tasks.items():
        names = ("auc", "logloss") if is_binary(figures) else ("mse",)
        label = f"window {{}} [{task}]" if len(tasks) > 1 else "window {}"
        for key in names:
            text = label.format(key.upper() if key in ("auc", "mse") else key)
            lines.append(f"{text:<16} {_fmt(figures.get(key))}")
    return lines
