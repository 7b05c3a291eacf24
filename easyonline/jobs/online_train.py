"""``online_train`` and ``build_trainer``: the Python entry points the train CLI is a thin layer over.

Takes a config (the model and everything else are built from it), a source
(a KafkaInput or any BatchSource, an iterable of (features, labels) batches,
or nothing to read the config's input) and Keras-style callbacks.
"""
from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.callbacks import Callback
from easyonline.core.errors import ConfigError
from easyonline.distributed.cluster_config import ClusterConfig, cluster_from_env
from easyonline.distributed.cluster_trainer import ClusterTrainer
from easyonline.distributed.strategy import log_distribution
from easyonline.features.csv_parser import ParsedBatch
from easyonline.inputs.raw_batch import BatchSource, RawBatch
from easyonline.jobs.default_callbacks import default_callbacks as build_default_callbacks
from easyonline.protos import pipeline_pb2
from easyonline.train.trainer import OnlineTrainer, TrainSummary
from easyonline.train.training_loop import TrainingLoop

tf = ensure_legacy_keras()


class IterableSource(BatchSource):
    """Wraps an iterable of (features dict, labels) batches (numpy or tensors); positions count batches."""

    def __init__(self, batches: Iterable[Any]):
        self._iterator = iter(batches)
        self._done = False
        self._count = 0

    @property
    def exhausted(self) -> bool:
        return self._done

    def next_batch(self, timeout: float) -> Optional[RawBatch]:
        try:
            features, labels = next(self._iterator)
        except StopIteration:
            self._done = True
            return None
        self._count += 1
        labels = tf.convert_to_tensor(np.asarray(labels, np.float32).reshape(-1))
        tensors = {name: value if isinstance(value, (tf.Tensor, tf.RaggedTensor)) else tf.convert_to_tensor(value)
                   for name, value in features.items()}
        parsed = ParsedBatch(tensors, labels, int(labels.shape[0]), [])
        return RawBatch([], {0: self._count}, lag=None, messages=1, parsed=parsed)


def build_trainer(config: pipeline_pb2.PipelineConfig, online: bool = True, source: Optional[BatchSource] = None,
                  callbacks: Sequence[Callback] = (), default_callbacks: bool = True,
                  cluster: Optional[ClusterConfig] = None) -> TrainingLoop:
    """A trainer with the config's default callbacks (unless ``default_callbacks=False``), then ``callbacks``.

    With ``cluster`` (this process its chief or a worker), it is one trainer of that ps cluster.
    """
    log_distribution(config.train_config, cluster)  # EasyRec's train_distribute: what runs here
    chief = cluster is None or cluster.is_chief
    all_callbacks = (build_default_callbacks(config, chief) if default_callbacks else []) + list(callbacks)
    if cluster is None:
        return OnlineTrainer(config, online=online, source=source, callbacks=all_callbacks)
    return ClusterTrainer(config, cluster, online=online, source=source, callbacks=all_callbacks)


def online_train(config: pipeline_pb2.PipelineConfig, source: Union[BatchSource, Iterable[Any], None] = None,
                 callbacks: Sequence[Callback] = (), online: bool = True,
                 default_callbacks: bool = True) -> TrainSummary:
    """Trains until the source ends (or, online, until stopped); returns the TrainSummary.

    With ``TF_CONFIG`` naming this process the chief or a worker of a cluster, trains as one of its
    trainers, on its ps (docs/distributed.md); otherwise in this process.

    ``default_callbacks=False`` drops the config's checkpoint / shrink / stop-file / publishing
    schedules so that ``callbacks`` replace them.
    """
    if source is not None and not isinstance(source, BatchSource):
        source = IterableSource(source)
    cluster = cluster_from_env()
    if cluster is not None and cluster.task_type == "ps":
        raise ConfigError("TF_CONFIG.task.type", "online_train runs a trainer (chief or worker), not a ps (start "
                          "those with python -m easyonline.train: they serve until stopped)")
    return build_trainer(config, online, source, callbacks, default_callbacks, cluster).run()
