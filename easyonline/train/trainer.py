"""OnlineTrainer: the training loop on this process's tf.function steps.

The loop (training_loop.py) scores each batch, trains on it, checkpoints
with positions and reports; the EagerEngine (eager_engine.py) builds the
model and runs its steps. Reading and parsing run ahead on the Prefetcher's
thread. Every batch is scored before it is trained on, so the windowed AUC
and logloss are out-of-sample.
"""
from typing import Dict, Optional, Sequence

import numpy as np

from easyonline.core.callbacks import Callback
from easyonline.inputs.raw_batch import BatchSource
from easyonline.protos import pipeline_pb2
from easyonline.train.eager_engine import EagerEngine, check_task_labels
from easyonline.train.threading_config import apply_thread_config
from easyonline.train.training_loop import TrainingLoop, TrainSummary, cpu_seconds

__all__ = ["OnlineTrainer", "TrainSummary", "check_task_labels", "cpu_seconds"]


class OnlineTrainer(TrainingLoop):
    """Trains the config's model in this process from a source of batches, calling ``callbacks`` (and only
    those).

    ``easyonline.jobs.online_train.build_trainer`` adds the config's default
    callbacks (checkpoints, shrinks, the stop file, publishing, base/delta saves).
    """

    engine: EagerEngine

    def __init__(self, config: pipeline_pb2.PipelineConfig, online: bool = True,
                 source: Optional[BatchSource] = None, callbacks: Sequence[Callback] = ()):
        apply_thread_config(config.train_config)
        super().__init__(config, online, source, callbacks, EagerEngine)

    def train_batch(self, features, labels, sample_weight=None) -> Dict[str, np.ndarray]:
        """Scores then trains one parsed batch (with its sample weights when data_config.sample_weight names
        a field); returns each task's pre-update predictions, by task name (``EagerEngine.train_batch``).
        Counts nothing: the loop counts the batches it trains."""
        return self.engine.train_batch(features, labels, sample_weight)

    def train_vectors(self, vectors) -> Dict[str, np.ndarray]:
        """``train_batch`` of a batch parsed into arrays (``vector_csv.VectorBatch``)."""
        return self.engine.train_vectors(vectors)
