"""Build the model the config describes, shaped like a checkpoint, and fill it from that checkpoint.

The trainer, the scoring model (eval, predict) and the exporter all start
this way, so it is written once. A cluster's checkpoint holds every table in
as many shards as it had ps; the model is built with that many shards in
this process, so a single process (or an export) gathers them.
"""
import contextlib
import dataclasses
import logging
from typing import ContextManager, Dict, Optional

from easyonline.checkpoint.checkpointer import checkpoint_step
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.embedding.dynamic_tables import CheckpointTables, checkpoint_tables, local_shards, table_capacities
from easyonline.features import FeatureSpecs, build_feature_specs
from easyonline.features.signature import empty_features
from easyonline.models.builder import build_model
from easyonline.models.base import Model
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()
log = logging.getLogger(__name__)


def model_with_shards(config: pipeline_pb2.PipelineConfig, specs: FeatureSpecs, shards: int,
                      scope: Optional[ContextManager] = None, rows: Optional[Dict[str, int]] = None) -> Model:
    """The config's model, its tables in ``shards`` shards in this process and sized for ``rows`` (a
    checkpoint's ``checkpoint_tables``; 1 shard and empty tables without one), built in ``scope``."""
    with scope or contextlib.nullcontext(), local_shards(shards), table_capacities(rows or {}):
        return build_model(config, specs)


def restore_into(model: Model, checkpoint: str) -> int:
    """Replaces the model's parameters with the checkpoint's; returns its step (-1 for a model-only one).

    The tables are cleared first, so keys evicted since an earlier restore do not linger.
    """
    for layer in model.tables.embeddings.values():
        layer.params.clear()
    for statistics in model.tables.statistics.values():
        statistics.clear()
    tf.train.Checkpoint(model=model).restore(checkpoint).expect_partial()
    try:
        return checkpoint_step(checkpoint)
    except tf.errors.NotFoundError:  # a model-only checkpoint (tf.train.Checkpoint(model=...).write)
        return -1


@dataclasses.dataclass
class RestoredModel:
    model: Model
    specs: FeatureSpecs
    checkpoint: str
    step: int
    shards: int


def restore_model(config: pipeline_pb2.PipelineConfig, checkpoint: str, specs: Optional[FeatureSpecs] = None,
                  tables: Optional[CheckpointTables] = None) -> RestoredModel:
    """The config's model with the parameters of ``checkpoint`` (a prefix), ready to score (no optimizer).

    ``tables``: the checkpoint's ``checkpoint_tables``, when the caller has already read them.
    """
    specs = specs or build_feature_specs(config)
    tables = tables or checkpoint_tables(checkpoint)
    shards = tables.shards
    model = model_with_shards(config, specs, shards, rows=tables.rows)
    model(empty_features(specs), training=False)  # creates the dense variables the checkpoint fills
    model.tables.release_names()
    step = restore_into(model, checkpoint)
    log.info("loaded %s (step %d, %d keys)", checkpoint, step, sum(model.tables.sizes().values()))
    return RestoredModel(model, specs, checkpoint, step, shards)
