"""The kind of each label field, from the model's tasks: what the parser checks a label against.

A binary task's label must be 0 or 1, a regression task's any finite number.
The model's tasks decide (its task towers' loss types, or model_config.loss_type
for a single-task model), so the parser never guesses a label's meaning. A
label two tasks of different kinds learn from must satisfy both: binary.
"""
from typing import Dict

from easyonline.models.registry import lookup
from easyonline.protos import pipeline_pb2
from easyonline.tasks.from_config import REGRESSION_LOSSES

BINARY, REGRESSION = "binary", "regression"


def _kind(loss_type: int) -> str:
    return REGRESSION if loss_type in REGRESSION_LOSSES else BINARY


def label_kinds(config: pipeline_pb2.PipelineConfig) -> Dict[str, str]:
    """{label field: "binary" | "regression"} for every label the model's tasks learn from."""
    model = config.model_config
    labels = list(config.data_config.label_fields)
    entry = lookup(model.model_class) if model.model_class else None
    chosen = model.WhichOneof("model")
    towers = entry.model_class.task_towers(getattr(model, chosen)) if entry is not None and chosen else []
    if not towers:
        return {labels[0]: _kind(model.loss_type)} if labels else {}
    kinds: Dict[str, str] = {}
    for i, tower in enumerate(towers):
        label = tower.label_name or (labels[i] if i < len(labels) else "")
        if label:
            kinds[label] = BINARY if kinds.get(label) == BINARY else _kind(tower.loss_type)
    return kinds
