"""Hooks into the training loop, Keras-style: subclass and override what you need."""


class Callback:
    """Called by OnlineTrainer on its own thread; keep each call short."""

    def on_train_begin(self, trainer) -> None:
        pass

    def on_batch_end(self, trainer, raw_batch, parsed_batch, probs) -> None:
        """After a batch was scored (``probs``: numpy, before its update) and trained on."""

    def on_checkpoint(self, trainer, path: str) -> None:
        pass

    def on_train_end(self, trainer, summary) -> None:
        pass
