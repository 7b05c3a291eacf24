"""A trainer of a parameter-server cluster: it reads its own partitions and trains them concurrently.

The training loop of a single process (train/training_loop.py) on a
``SessionEngine`` (session_engine.py), which does all that follows.

Asynchronous data parallelism with between-graph replication, on
TensorFlow's own distributed runtime (as EasyRec's TF1 ps jobs and Paddle's
``a_sync`` mode): the chief and every worker are trainers, each with its
own graph (train_graph.py) and session; the ps hold the parameters and the
shared state (shared_state.py). Trainer i of n reads the Kafka partitions
p with ``p % n == i``, parses, scores and trains its batches without
waiting for the others.

- **Start.** The chief initialises the parameters, or restores the latest
  checkpoint into the ps (its positions included), then raises the shared
  ``ready`` flag; the others wait for it. A chief that restarts while the
  ps still hold a ready model keeps it (restoring would roll back every
  trainer's work since the checkpoint). The trainers of a starting cluster
  then wait for each other, at most START_TOGETHER_SECS, so that they
  begin stepping together; a trainer that restarts later does not wait.
- **Positions.** Each step moves its batch's partitions forward in the
  shared positions once its updates are applied; a trainer (re)starts its
  partitions from there. So a trainer killed at any moment resumes after
  the last batch whose update was applied; only the batch in flight is
  trained again (and may have been applied in part).
- **Checkpoints.** The chief reads the shared positions, then saves the
  parameters: every update up to those positions is in the checkpoint, and
  a whole-cluster restart, with any number of trainers, repeats at most
  what came after it, never loses a sample.
- **Metrics.** Every trainer's step adds its pre-update scores to shared
  histograms, so the status line's AUC, logloss and CTR cover all
  trainers (Paddle's global AUC), as do its step, samples and rate.
- **Publishing.** Every step adds its trained keys to a key set beside each
  table on the ps; the chief's publishers drain those sets and read the
  rows through its session, so an update carries every trainer's keys.
  Eviction runs on the chief, on the ps's tables, through the same session.
- **Offline runs** end when every trainer has caught up: each marks itself
  finished, and the chief waits for all before its final checkpoint.
- **Failures.** A lost ps loses its parameters: every trainer stops with
  ClusterFailure (exit code 5) and the cluster restarts from the last
  checkpoint. A lost worker or chief stops nothing else; restarted, it
  resumes its partitions from the shared positions.
"""
from typing import Optional, Sequence

from easyonline.core.callbacks import Callback
from easyonline.distributed.cluster_config import ClusterConfig
from easyonline.distributed.session_engine import START_TOGETHER_SECS, SessionEngine, wait_for_tasks
from easyonline.inputs.raw_batch import BatchSource
from easyonline.protos import pipeline_pb2
from easyonline.train.training_loop import TrainingLoop

__all__ = ["ClusterTrainer", "START_TOGETHER_SECS", "wait_for_tasks"]


class ClusterTrainer(TrainingLoop):
    """One trainer (the chief or a worker) of ``cluster``; otherwise the OnlineTrainer's arguments."""

    engine: SessionEngine

    def __init__(self, config: pipeline_pb2.PipelineConfig, cluster: ClusterConfig, online: bool = True,
                 source: Optional[BatchSource] = None, callbacks: Sequence[Callback] = ()):
        self.cluster = cluster
        super().__init__(config, online, source, callbacks, lambda loop: SessionEngine(loop, cluster))
