"""Checkpoint file I/O on the trainer that saves or restores, never on a ps: ps hosts need no disk.

TensorFlow's sharded save writes each device's shard from the host of that
device (a ``SaveV2`` on every ps, into ``<prefix>_temp/``), then merges
them; its restore reads on the host of each variable. On Kubernetes a ps pod
has no volume: model_dir is the trainers' NFS or OSS (through the chief's
local mirror cache), so a ps's ``SaveV2`` failed with ``NotFoundError:
.../model.ckpt-N_temp`` and no checkpoint was ever written.

With ``experimental_io_device`` set to this trainer's CPU, every shard's
``SaveV2``, the merge and the ``RestoreV2`` run here: the ps only export
their variables and tables (TFRA's ``CuckooHashTable`` saveable exports on
the table's ps and imports there, colocated with the table), and the tensors
travel between ps and trainer over the cluster's own gRPC runtime, as the
training steps' do. The checkpoint's files and names are unchanged.
"""
import contextlib
from typing import Any, Callable, ContextManager

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.distributed.cluster_config import ClusterConfig

tf = ensure_legacy_keras()


def io_device(cluster: ClusterConfig) -> str:
    """This task's CPU, e.g. ``/job:chief/task:0/device:CPU:0``."""
    return f"{cluster.device}/device:CPU:0"


def io_options(cluster: ClusterConfig) -> tf.train.CheckpointOptions:
    """Options for every save and restore of this task's checkpoints: all file I/O on this task."""
    return tf.train.CheckpointOptions(experimental_io_device=io_device(cluster))


class SessionIO:
    """The checkpointer's access to a cluster trainer's variables (checkpoint/checkpointer.py ``VariableIO``):
    read and restored through its session, in its graph, every file on this task (``io_options``)."""

    def __init__(self, graph: Any, session: Any, run: Callable, cluster: ClusterConfig):
        self._graph, self._session, self._run = graph, session, run
        self.options = io_options(cluster)

    def read(self, variable: Any) -> Any:
        return self._run(variable)

    def context(self) -> ContextManager:
        stack = contextlib.ExitStack()
        stack.enter_context(self._graph.as_default())
        stack.enter_context(self._session.as_default())
        return stack

    def finish_restore(self, status: Any) -> None:
        status.run_restore_ops(self._session)
