"""The callback contract: hooks into the training loop, Keras-style, and the trainer view they get.

Subclass ``Callback`` and override what you need. The trainer's own
schedules (checkpoints, shrinks, the stop file, incremental publishing,
base/delta saves) are callbacks too, added by ``build_trainer`` /
``online_train`` (easyonline.jobs); pass ``default_callbacks=False`` to replace them. Every hook receives the
trainer as a ``TrainerView``: what a callback may read and call, typed and
documented here so that callbacks need not import the trainer. To stop
training from a callback, call ``trainer.stop("reason")``.
"""
from typing import Any, Callable, Dict, List, Optional, Protocol, TypeVar

import numpy as np

from easyonline.core.lease import ModelDirLease

Key = TypeVar("Key")


class TrainerView(Protocol):
    """What a callback sees of the trainer (``train.training_loop.TrainingLoop`` implements it, the loop of
    ``OnlineTrainer`` and ``ClusterTrainer``).

    Attributes:
      config: the PipelineConfig the trainer runs.
      step: batches trained so far (restored from the checkpoint at start).
      positions: {partition: next offset} after the last trained batch (what a checkpoint saves).
      model: the Keras ranking model (``model.tables`` are its dynamic embedding tables).
      specs: the feature specs built from the config.
      changes: the change tracker: subscribe to it to learn which keys were trained or deleted.
      metrics: the primary task's prequential metrics over the sliding window: ``figures()`` by name (``auc``,
        ``logloss``, ``ctr`` of a binary task, which also has ``auc()``, ``logloss()``, ``ctr()``; ``mse``,
        ``label_mean`` of a regression task). Every task's: ``task.metrics`` of ``model.tasks``.
      callbacks: the callbacks in order (a callback may append one).
      clock: the clock of the id statistics and daily schedules (seconds, like ``time.time``).
      last_checkpoint: the path of the newest checkpoint, or None.
      restored_from: the checkpoint this run started from, or None.
      lag: messages not yet read after the last batch (all trainers' in a cluster's status), None if unknown;
        0 means caught up.
      evicted: {table: numpy array of the keys evicted since start} (publishing sends their deletes).
      writer_lock: model_dir's lease while the loop runs (``core/lease.py``; None in a process that does not
        write model_dir): a writer beside the loop asks ``held()`` before each write and stops once ``lost``.
    """

    config: Any
    positions: Dict[int, int]
    model: Any
    specs: Any
    changes: Any
    metrics: Any
    callbacks: List["Callback"]
    clock: Callable[[], float]
    last_checkpoint: Optional[str]
    restored_from: Optional[str]
    lag: Optional[int]
    evicted: Dict[str, np.ndarray]

    @property
    def writer_lock(self) -> Optional[ModelDirLease]:
        """model_dir's lease while the loop runs (see Attributes)."""

    @property
    def step(self) -> int:
        """Batches trained so far (restored from the checkpoint at start; a cluster's: every trainer's)."""

    @property
    def last_saved_step(self) -> int:
        """The step of the last checkpoint written (or restored)."""

    def stop(self, reason: str) -> None:
        """Asks the loop to stop after the current batch."""

    def dispatch(self, hook: str, *args: Any) -> None:
        """Calls ``hook`` on every callback, in order."""

    def save_checkpoint(self) -> Optional[str]:
        """Checkpoints the model with the positions now; returns the path (a cluster's worker writes none:
        the chief's last one, or None)."""

    def shrink(self) -> Dict[str, np.ndarray]:
        """Evicts now per the tables' eviction policies; returns {table: evicted keys}."""

    def table_sizes(self) -> Dict[str, int]:
        """Rows per table."""

    def samples_trained(self) -> int:
        """Samples trained since the model began (a cluster's: every trainer's)."""

    def table_rows(self) -> Any:
        """The tables' rows for publishing and base/delta saves, a ``publish.snapshot.TableRows`` (read from
        any thread; in a cluster, through the chief's session)."""

    def read_variables(self, variables: Dict[Key, Any]) -> Dict[Key, np.ndarray]:
        """The current values of ``variables`` (a dict of the model's variables), as numpy."""

    def read_step(self) -> int:
        """The step now: a cluster's read from its ps at this call (``step`` is as of this trainer's last step
        or status line: other trainers step meanwhile); a single process's own ``step``."""

    def status_dir(self) -> str:
        """This trainer's own folder for status files (``<model_dir>/train``; a cluster's other trainers:
        ``<model_dir>/train_worker<i>``)."""


class Callback:
    """Called by the trainer on its own thread; keep each call short."""

    def on_train_begin(self, trainer: TrainerView) -> None:
        pass

    def on_batch_begin(self, trainer: TrainerView, raw_batch: Any, parsed_batch: Any) -> None:
        """Just before a parsed batch of at least one sample is trained on (its step's session.run)."""

    def on_batch_end(self, trainer: TrainerView, raw_batch: Any, parsed_batch: Any, probs: np.ndarray) -> None:
        """After a batch was scored (``probs``: numpy, before its update) and trained on."""

    def on_tick(self, trainer: TrainerView) -> None:
        """Every turn of the loop, with or without a batch (at least twice a second): for time-based work."""

    def next_tick_in(self, trainer: TrainerView) -> Optional[float]:
        """Seconds until this callback's time-based work is due, when that is sooner than the loop's half
        second: the loop then waits for input no longer than that, and ticks on time. None: no sooner."""
        del trainer
        return None

    def on_metrics(self, trainer: TrainerView, logs: Dict[str, Any]) -> None:
        """Every log_step_count_secs: the status figures (samples, rate, lag, auc, logloss, ctr, keys...)."""

    def on_checkpoint(self, trainer: TrainerView, path: str) -> None:
        pass

    def on_shrink(self, trainer: TrainerView, evicted: Dict[str, np.ndarray]) -> None:
        """After an eviction: {table: numpy array of the keys removed}."""

    def on_publish(self, trainer: TrainerView, result: Any) -> None:
        """After an incremental update was acknowledged (a publish.publisher.PublishResult)."""

    def status_fields(self) -> Dict[str, str]:
        """Extra {name: text} for the trainer's status line."""
        return {}

    def on_train_end(self, trainer: TrainerView, summary: Any) -> None:
        """After the last checkpoint; ``summary`` is the TrainSummary the run returns."""
