"""Scores parsed batches with a checkpoint or an export and writes ``<probability>\\t<sample>`` lines."""
import dataclasses
import logging
import time
from typing import Callable, Dict, Iterable

import numpy as np

from easyonline.features.csv_parser import ParsedBatch
from easyonline.predict.sinks import PredictionSink, prediction_lines
from easyonline.scoring.checkpoint_model import CheckpointModel
from easyonline.serve.loaded_export import LoadedExport

log = logging.getLogger(__name__)
Scorer = Callable[[Dict], np.ndarray]


def checkpoint_scorer(config, checkpoint_path: str) -> Scorer:
    model = CheckpointModel(config)
    model.restore(checkpoint_path)
    return model.score


def export_scorer(export_dir: str) -> Scorer:
    return LoadedExport(export_dir).score_features


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
            sink.write(prediction_lines(score(batch.features), batch.lines))
            samples += batch.size
            if time.time() >= next_log:
                log.info("scored %d samples", samples)
                next_log = time.time() + log_every_secs
    finally:
        sink.close()
    return PredictSummary(samples, time.time() - started)
