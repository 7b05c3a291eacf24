"""The kind of each label field, from the model's tasks: what the parser checks a label against.

A binary task's label must be 0 or 1, a regression task's any finite number.
The model's tasks decide (its task towers' loss types or ``losses``, or
model_config's for a single-task model), so the parser never guesses a
label's meaning: every loss but L2_LOSS is binary (EasyRec's pairwise and
JRC losses give probabilities, judged by AUC). A label two tasks of
different kinds learn from must satisfy both: binary.
Here, not in tasks/, because the Kafka reader process parses with the
feature specs and loads no TensorFlow; tasks/from_config.py takes its loss
types from here.
"""
from typing import Dict

from easyonline.protos import pipeline_pb2
from easyonline.protos.model_towers import towers_in

LossType = pipeline_pb2.LossType
BINARY_LOSSES = (LossType.CLASSIFICATION, LossType.BINARY_CROSS_ENTROPY_LOSS)
REGRESSION_LOSSES = (LossType.L2_LOSS,)

BINARY, REGRESSION = "binary", "regression"
#: the decoded sample weight's key among a batch's labels (not a field name: it has a slash); CsvParser's and
#: the reader process's array parser's
SAMPLE_WEIGHT_KEY = "/sample_weight"


def loss_kind(loss_type: int) -> str:
    """The kind of task one loss type makes."""
    return REGRESSION if loss_type in REGRESSION_LOSSES else BINARY


def task_kind(loss_type: int, losses=()) -> str:
    """A task's kind: of its ``losses`` when given (binary unless all are regression: tasks/from_config.py
    refuses a mix), else of its ``loss_type``."""
    if losses:
        return REGRESSION if all(loss_kind(loss.loss_type) == REGRESSION for loss in losses) else BINARY
    return loss_kind(loss_type)


def label_kinds(config: pipeline_pb2.PipelineConfig) -> Dict[str, str]:
    """{label field: "binary" | "regression"} for every label the model's tasks learn from."""
    model = config.model_config
    labels = list(config.data_config.label_fields)
    chosen = model.WhichOneof("model")
    towers = towers_in(getattr(model, chosen)) if chosen else []
    if not towers:
        return {labels[0]: task_kind(model.loss_type, model.losses)} if labels else {}
    kinds: Dict[str, str] = {}
    for i, tower in enumerate(towers):
        label = tower.label_name or (labels[i] if i < len(labels) else "")
        if label:
            kinds[label] = BINARY if kinds.get(label) == BINARY else task_kind(tower.loss_type, tower.losses)
    return kinds
