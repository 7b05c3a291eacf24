"""A model built from the config whose parameters come from a checkpoint, for scoring only.

Unlike an export, it needs no inference mode (which is process-global), so
it can live next to a trainer; lookups of unknown ids return zeros and
insert nothing. ``restore`` can be called again with a newer checkpoint: the
tables are cleared first, so keys evicted in between do not linger. A
cluster's checkpoint (tables sharded over its ps) is loaded with as many
shards in this process.
"""
import logging
from typing import Dict, List, Optional

import numpy as np

from easyonline.checkpoint.restore import restore_model, restore_into
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.config.secrets import apply_oss_config
from easyonline.embedding.dynamic_tables import checkpoint_tables
from easyonline.features import build_feature_specs
from easyonline.features.signature import feature_signature
from easyonline.protos import pipeline_pb2
from easyonline.tasks.output_names import prediction_names

tf = ensure_legacy_keras()
log = logging.getLogger(__name__)


class CheckpointModel:
    """Scores parsed features with the parameters of the checkpoint last ``restore``d."""

    def __init__(self, config: pipeline_pb2.PipelineConfig):
        apply_oss_config(config)
        self.config = config
        self.specs = build_feature_specs(config)
        self.model = None
        self.shards = 0
        self.checkpoint: Optional[str] = None
        self.step = -1
        self.prediction_names: List[str] = []  # tasks/output_names.py, once restored

    def restore(self, path: str) -> int:
        """Loads the checkpoint prefix ``path``; returns its training step (-1 for a model-only checkpoint)."""
        tables = checkpoint_tables(path)
        if self.model is not None and tables.shards == self.shards:
            self.step = restore_into(self.model, path)  # the traced scoring function is kept
            log.info("loaded %s (step %d, %d keys)", path, self.step, sum(self.model.tables.sizes().values()))
        else:  # the first, or one written by a cluster with another number of ps
            restored = restore_model(self.config, path, self.specs, tables)
            self.model, self.shards, self.step = restored.model, restored.shards, restored.step
            model = self.model
            self._score = tf.function(lambda features: model.task_outputs(model(features, training=False)),
                                      input_signature=[feature_signature(self.specs)], autograph=False)
            self.prediction_names = prediction_names(model.tasks)
        self.checkpoint = path
        return self.step

    def score(self, features) -> np.ndarray:
        """The primary task's predictions [B] for parsed features: probabilities (or a regression's values)."""
        return self._score(features)[self.prediction_names[0]].numpy()

    def predictions(self, features) -> Dict[str, np.ndarray]:
        """Every task's predictions [B] for parsed features, by output name (``prediction_names``' order)."""
        out = self._score(features)
        return {name: out[name].numpy() for name in self.prediction_names}

    def score_tasks(self, features) -> Dict[str, np.ndarray]:
        """Every task's predictions [B] by task name (what the eval job scores each task's label against)."""
        by_name = self.predictions(features)
        return {task.name: by_name[name] for task, name in zip(self.model.tasks, self.prediction_names)}
