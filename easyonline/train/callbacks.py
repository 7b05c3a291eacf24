"""Hooks into the training loop, Keras-style: subclass and override what you need.

The trainer's own schedules (checkpoints, shrinks, the stop file,
incremental publishing) are callbacks too (see builtin_callbacks.py): pass ``default_callbacks=False`` to
OnlineTrainer / online_train to replace them. To stop training from a
callback, call ``trainer.stop("reason")``.
"""


class Callback:
    """Called by OnlineTrainer on its own thread; keep each call short."""

    def on_train_begin(self, trainer) -> None:
        pass

    def on_batch_end(self, trainer, raw_batch, parsed_batch, probs) -> None:
        """After a batch was scored (``probs``: numpy, before its update) and trained on."""

    def on_tick(self, trainer) -> None:
        """Every turn of the loop, with or without a batch (at least twice a second): for time-based work."""

    def on_metrics(self, trainer, logs: dict) -> None:
        """Every log_step_count_secs: the status figures (samples, rate, lag, auc, logloss, ctr, keys...)."""

    def on_checkpoint(self, trainer, path: str) -> None:
        pass

    def on_shrink(self, trainer, evicted: dict) -> None:
        """After an eviction: {table: numpy array of the keys removed}."""

    def on_publish(self, trainer, result) -> None:
        """After an incremental update was acknowledged (a publish.publisher.PublishResult)."""

    def status_fields(self) -> dict:
        """Extra {name: text} for the trainer's status line."""
        return {}

    def on_train_end(self, trainer, summary) -> None:
        """After the last checkpoint; ``summary`` is the TrainSummary the run returns."""
