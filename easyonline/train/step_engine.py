"""The step engine: where and how training steps run, under the one training loop (training_loop.py).

The loop (reading, the callbacks, the status line, stop reasons, the
summary, model_dir's writer lock) is the same for a single process and for
a cluster's trainer; what differs is declared here and implemented twice:
``train.eager_engine.EagerEngine`` (tf.function steps over this process's
variables) and ``distributed.session_engine.SessionEngine`` (one session.run
of a between-graph replica, its parameters and shared state on the ps).

An engine owns building the model, restoring and saving it (through its one
``Checkpointer``), the step (a parsed batch in, each task's pre-update
predictions out), the counts of steps and samples (this process's, or the
cluster's), and reading the tables (sizes, rows for publishing, eviction).
"""
from typing import Any, Callable, Dict, Optional, Protocol, Sequence, Tuple

import numpy as np

from easyonline.checkpoint.checkpointer import Checkpointer
from easyonline.core.metrics import WindowFigures
from easyonline.train.task_figures import TaskFigures
from easyonline.core.stop_signal import StopSignal
from easyonline.embedding.change_tracker import ChangeTracker
from easyonline.embedding.eviction import TableOps
from easyonline.features.feature_spec import FeatureSpecs
from easyonline.inputs.raw_batch import BatchSource
from easyonline.publish.snapshot import TableRows


class LoopState(Protocol):
    """What an engine reads of the loop it runs under (``training_loop.TrainingLoop``), made before it."""

    config: Any  # the PipelineConfig
    specs: FeatureSpecs
    online: bool
    stop_signal: StopSignal
    clock: Callable[[], float]  # the clock of the id statistics (tests may replace it): read it at each use
    last_checkpoint: Optional[str]


class StepEngine(Protocol):
    """Building, restore and save, the step, the counts and the tables, for the loop.

    Attributes:
      model: the Keras ranking model (its ``tables``, ``tasks``).
      optimizer: the training optimizer.
      checkpointer: the one checkpointer (model, optimizer, step, samples, positions).
      metrics: the status line's metrics (the primary task's; a cluster's are every trainer's).
      changes: the change tracker publishing and base/delta saves subscribe to.
      restored_from: the checkpoint the model was restored from when the engine was built, or None.
      step: batches trained so far (a cluster's: every trainer's, as of this trainer's last step or refresh).
      can_checkpoint: False once the parameters are lost (a parameter server died).
      writes_model_dir: whether this process writes checkpoints and updates to model_dir (and holds its lock).
      trainers: how many trainers step the tables (1 in a single process): size_bound.py's headroom estimate.
    """

    model: Any
    optimizer: Any
    checkpointer: Checkpointer
    changes: ChangeTracker
    restored_from: Optional[str]
    step: int
    can_checkpoint: bool
    writes_model_dir: bool
    trainers: int

    @property
    def metrics(self) -> WindowFigures:
        """The primary task's metrics (read-only here: an engine's may be of its own kind)."""

    def task_figures(self) -> TaskFigures:
        """Every task's window figures by task name, the primary first (a cluster's: every trainer's)."""

    # --- the step -------------------------------------------------------------------
    def train_and_count(self, raw: Any, parsed: Any) -> np.ndarray:
        """Scores and trains a non-empty parsed batch, adds it to the metrics and counts; returns the
        primary task's pre-update predictions."""

    def count(self, samples: int) -> None:
        """One more step (an empty batch) of ``samples`` samples (a cluster counts on its ps: nothing)."""

    def samples_trained(self) -> int:
        """Samples trained since the model began (a cluster's: every trainer's)."""

    def samples_at_start(self) -> int:
        """What ``samples_trained`` was when this run began (the summary counts from there)."""

    # --- input and status -----------------------------------------------------------------
    def make_source(self) -> BatchSource:
        """The configured input (a cluster trainer's share of it), from the restored or shared positions."""

    def status_dir(self) -> str:
        """Where the status figures go for TensorBoard."""

    def refresh(self) -> None:
        """Reads the figures the status line shows that other processes change (a cluster's step, samples,
        lag and metrics); nothing in a single process."""

    def status_lag(self, lag: Optional[int]) -> Optional[int]:
        """The lag the status line shows, given this process's (``lag``): a cluster shows all its trainers'."""

    # --- checkpoints --------------------------------------------------------------------
    @property
    def last_saved_step(self) -> int:
        """The step of the last checkpoint written or restored (a worker's: its step, it never saves)."""

    def save(self, positions: Dict[int, int], topic: str, topic_id: str = "") -> Tuple[str, Dict[int, int]]:
        """Checkpoints the model at ``step`` with the positions it holds every update up to (of ``topic``,
        whose Kafka id is ``topic_id``, "" if unknown); returns the path and those positions (the loop's
        ``positions``, or a cluster's shared ones)."""

    def before_final_checkpoint(self, stop_reason: str) -> Optional[Dict[int, int]]:
        """Once the loop has ended, before the final checkpoint (a cluster's chief waits for its trainers);
        returns the positions the final checkpoint holds when they are not the loop's, else None."""

    # --- the tables ------------------------------------------------------------------
    def table_sizes(self) -> Dict[str, int]:
        """Rows per table."""

    def table_rows(self) -> TableRows:
        """The tables, for publishing and base/delta saves (thread-safe reads)."""

    def table_ops(self) -> TableOps:
        """How eviction reads and writes the tables."""

    def bounded_sizes(self, tables: Sequence[str]) -> Dict[str, Tuple[int, int]]:
        """(rows, statistics) of each of ``tables`` (tables with an eviction config), in one call: the size
        checks of embedding/size_bound.py."""

    def read_variables(self, variables: Dict) -> Dict:
        """The current values of ``variables`` (a dict of the model's variables), as numpy."""

    def read_step(self) -> int:
        """The step now (a cluster's: read from the ps at this call)."""
