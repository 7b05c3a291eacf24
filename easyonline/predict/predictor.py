"""Scores parsed batches with a checkpoint or an export and writes ``<prediction>...\\t<sample>`` lines.

A scorer returns every task's predictions by output name (tasks/output_names.py: ``probs`` for one binary
task, ``y`` for one regression, ``probs_<tower>`` / ``y_<tower>`` per tower of a multi-task model), in task
order: one column each, the primary task's first.
"""
import dataclasses
import logging
import time
from typing import Callable, Dict, Iterable, List, Tuple

import numpy as np

from easyonline.features.csv_parser import ParsedBatch
from easyonline.predict.sinks import PredictionSink, prediction_lines
from easyonline.scoring.checkpoint_model import CheckpointModel
from easyonline.serve.loaded_export import LoadedExport

log = logging.getLogger(__name__)
Scorer = Callable[[Dict], Dict[str, np.ndarray]]


def checkpoint_scorer(config, checkpoint_path: str) -> Tuple[Scorer, List[str]]:
    """(the scorer, its column names) of a checkpoint."""
    model = CheckpointModel(config)
    model.restore(checkpoint_path)
    return model.predictions, list(model.prediction_names)


def export_scorer(export_dir: str) -> Tuple[Scorer, List[str]]:
    """(the scorer, its column names) of an export (a version, or the newest in a directory of versions)."""
    export = LoadedExport(export_dir)
    return export.predictions, list(export.prediction_names)


@dataclasses.dataclass
class PredictSummary:
    samples: int
    seconds: float


def predict(score: Scorer, batches: Iterable[ParsedBatch], sink: PredictionSink,
            log_every_secs: float = 10.0) -> PredictSummary:
    """Scores every batch and writes its lines; closes the sink (which raises if the output failed)."""
    started = next_log = time.time()
    samples = 0
    try:
        for batch in batches:
            sink.write(prediction_lines(list(score(batch.features).values()), batch.lines))
            samples += batch.size
            if time.time() >= next_log:
                log.info("scored %d samples", samples)
                next_log = time.time() + log_every_secs
    finally:
        sink.close()
    return PredictSummary(samples, time.time() - started)
