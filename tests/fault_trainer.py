"""A trainer process for the fault test: trains from the config and records, durably, what it trained.

    python -m tests.fault_trainer <pipeline.config> <record file>

Every sample of the fault test's stream carries its number in C26 (``n<k>``).
Per trained batch one ``T`` line (the step, then ``number:probability:labels``
per sample, the labels joined by ``/`` in label_fields order) and per checkpoint
one ``C`` line are appended and fsynced before training goes on, so a SIGKILL loses at most the batch being recorded.
"""
import os
import sys

import easyonline  # noqa: F401  pylint: disable=unused-import  (sets TF_USE_LEGACY_KERAS first)
from easyonline.config import load_pipeline_config
from easyonline.jobs.default_callbacks import default_callbacks
from easyonline.core.callbacks import Callback
from easyonline.jobs.online_train import build_trainer
from easyonline.utils.logs import setup_logging


class Recorder(Callback):
    def __init__(self, path):
        self._file = open(path, "a")

    def _write(self, line):
        self._file.write(line + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def on_train_begin(self, trainer):
        self._write(f"S {trainer.step} {trainer.restored_from}")

    def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
        numbers = [line.rsplit(b",", 1)[1].decode()[1:] for line in raw_batch.lines if line]
        labels = _labels(parsed_batch)
        self._write(f"T {trainer.step} " + " ".join(f"{n}:{p:.6f}:{l}" for n, p, l in zip(numbers, probs, labels)))

    def on_checkpoint(self, trainer, path):
        self._write(f"C {trainer.step} {path}")

    def on_train_end(self, trainer, summary):
        self._write(f"E {trainer.step} {summary.stop_reason}")


def _labels(parsed_batch):
    """Each sample's labels as text: its one label (``1``), or every label field's in order (``1/0``)."""
    by_name = parsed_batch.label_dict or {"": parsed_batch.labels}
    columns = [value.numpy() for value in by_name.values()]
    return ["/".join(str(int(c[i])) for c in columns) for i in range(parsed_batch.size)]


if __name__ == "__main__":
    setup_logging("WARNING")
    config = load_pipeline_config(sys.argv[1])
    # The recorder goes first: a batch's T line is written before the checkpoint that may follow it.
    callbacks = [Recorder(sys.argv[2])] + default_callbacks(config)
    build_trainer(config, online=True, callbacks=callbacks, default_callbacks=False).run()
