"""The start and end time of each training step, for whoever asks (``--record_step_spans``): they show whether
a cluster's trainers are inside a step at the same time, and how much of its time a trainer spends in steps
rather than waiting for input (tools/bench/cluster_throughput.py reads them). Not recorded unless asked."""
import collections
import os
import time
from typing import Any, Deque, Tuple

import numpy as np

from easyonline.core.callbacks import Callback, TrainerView
from easyonline.utils import fileio

SPANS_FILE = "step_spans.npy"


class StepSpans(Callback):
    """Keeps the last ``limit`` steps' (start, end) unix times and writes them, as a float64 array [steps, 2],
    to ``<status dir>/step_spans.npy`` when training ends (a local model_dir only)."""

    def __init__(self, limit: int = 100000):
        self.spans: Deque[Tuple[float, float]] = collections.deque(maxlen=limit)
        self._started = 0.0

    def on_batch_begin(self, trainer: TrainerView, raw_batch: Any, parsed_batch: Any) -> None:
        self._started = time.time()

    def on_batch_end(self, trainer: TrainerView, raw_batch: Any, parsed_batch: Any, probs: np.ndarray) -> None:
        self.spans.append((self._started, time.time()))

    def on_train_end(self, trainer: TrainerView, summary: Any) -> None:
        folder = trainer.status_dir()
        if self.spans and not fileio.is_oss(folder):
            os.makedirs(folder, exist_ok=True)
            np.save(os.path.join(folder, SPANS_FILE), np.asarray(self.spans))
