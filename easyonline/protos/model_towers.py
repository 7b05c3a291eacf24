"""The task towers of any model's settings message, found by their type: one task per tower.

Read from the message's fields, so that neither the config validator, the
label kinds (features/label_kinds.py, which the Kafka reader process loads
without TensorFlow) nor a model class needs to know which models have towers:
a new multi-task model's message with ``TaskTower`` fields has its tasks.
"""
from typing import List

from easyonline.protos import pipeline_pb2

TOWER_TYPES = (pipeline_pb2.TaskTower.DESCRIPTOR, pipeline_pb2.BayesTaskTower.DESCRIPTOR)


def towers_in(settings) -> List:
    """The task towers in a model's settings, in field order (``task_towers``, ESMM's ``ctr_tower`` and
    ``cvr_tower``)."""
    towers: List = []
    for field in settings.DESCRIPTOR.fields:
        if field.message_type not in TOWER_TYPES:
            continue
        if field.label == field.LABEL_REPEATED:
            towers.extend(getattr(settings, field.name))
        elif settings.HasField(field.name):
            towers.append(getattr(settings, field.name))
    return towers
