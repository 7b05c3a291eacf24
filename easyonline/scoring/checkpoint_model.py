"""A model built from the config whose parameters come from a checkpoint, for scoring only.

Unlike an export, it needs no inference mode (which is process-global), so
it can live next to a trainer; lookups of unknown ids return zeros and
insert nothing. ``restore`` can be called again with a newer checkpoint: the
tables are cleared first, so keys evicted in between do not linger. A
cluster's checkpoint (tables sharded over its ps) is loaded with as many
shards in this process.
"""
import logging

import numpy as np

from easyonline import ensure_legacy_keras
from easyonline.config.secrets import apply_oss_config
from easyonline.embedding.dynamic_tables import checkpoint_shards, local_shards
from easyonline.features import build_feature_specs
from easyonline.features.signature import empty_features, feature_signature
from easyonline.models import build_model
from easyonline.protos import pipeline_pb2
from easyonline.train.checkpointing import checkpoint_step

tf = ensure_legacy_keras()
log = logging.getLogger(__name__)


class CheckpointModel:
    def __init__(self, config: pipeline_pb2.PipelineConfig):
        apply_oss_config(config)
        self.config = config
        self.specs = build_feature_specs(config)
        self._build(1)
        self.checkpoint = None
        self.step = -1

    def _build(self, shards: int) -> None:
        with local_shards(shards):
            self.model = build_model(self.config, self.specs)
        self.shards = shards
        self.model(empty_features(self.specs), training=False)  # creates the dense variables
        self.model.tables.release_names()
        self._score = tf.function(lambda features: self.model(features, training=False),
                                  input_signature=[feature_signature(self.specs)], autograph=False)

    def restore(self, path: str) -> int:
        """Loads the checkpoint prefix ``path``; returns its training step (-1 for a model-only checkpoint)."""
        shards = checkpoint_shards(path)
        if shards != self.shards:  # written by a cluster with another number of ps
            self._build(shards)
        tables = self.model.tables
        for layer in tables.embeddings.values():
            layer.params.clear()
        for statistics in tables.statistics.values():
            statistics.clear()
        tf.train.Checkpoint(model=self.model).restore(path).expect_partial()
        try:
            self.step = checkpoint_step(path)
        except tf.errors.NotFoundError:  # a model-only checkpoint (tf.train.Checkpoint(model=...).write)
            self.step = -1
        self.checkpoint = path
        log.info("loaded %s (step %d, %d keys)", path, self.step, sum(tables.sizes().values()))
        return self.step

    def score(self, features) -> np.ndarray:
        """Probabilities [B] for parsed features."""
        return tf.sigmoid(self._score(features)).numpy()
