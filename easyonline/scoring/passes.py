"""One pass over an input for scoring: to the end of the files, or of the topic as it stands, or following it.

Lines go through the config's parser and the same bad-input accounting as
training (``BadInputMonitor``): bad samples are counted by reason and
skipped, and too many stop the pass with BadInputError.
"""
import time
from typing import Callable, Iterator

from easyonline.features.csv_parser import ParsedBatch
from easyonline.inputs.raw_batch import BatchSource
from easyonline.inputs.bad_input import BadInputMonitor


def head(batch: ParsedBatch, count: int) -> ParsedBatch:
    """The first ``count`` samples of a batch."""
    features = {name: value[:count] for name, value in batch.features.items()}
    lines = batch.lines[:count] if batch.lines is not None else None
    label_dict = {name: value[:count] for name, value in batch.label_dict.items()} if batch.label_dict else None
    return ParsedBatch(features, batch.labels[:count], count, batch.rejected, lines, label_dict=label_dict)


def parsed_batches(source: BatchSource, parser, bad_input: BadInputMonitor, max_samples: int = 0,
                   follow: bool = False, should_stop: Callable[[], bool] = lambda: False,
                   idle_timeout_secs: float = 120.0) -> Iterator[ParsedBatch]:
    """Parsed batches until the source ends or has nothing more for now (unless ``follow``), ``max_samples``
    (0: no limit) or ``should_stop()``. Without ``follow``, a source that neither delivers nor can say it is
    at its end (an unreachable broker) for ``idle_timeout_secs`` raises TimeoutError."""
    samples = 0
    idle_since = time.time()
    while not should_stop():
        raw = source.next_batch(timeout=0.5)
        if raw is None:
            if source.exhausted or (not follow and source.idle_lag == 0):
                return
            if not follow and time.time() - idle_since > idle_timeout_secs:
                raise TimeoutError(f"the input delivered nothing for {idle_timeout_secs:.0f}s and its end is unknown "
                                   "(is the broker reachable?)")
            continue
        idle_since = time.time()
        batch = parser.parse(raw.lines)
        bad_input.record(batch.size, raw.rejected + batch.rejected, raw.empty_messages)
        if max_samples and samples + batch.size >= max_samples:
            yield head(batch, max_samples - samples)
            return
        samples += batch.size
        if batch.size:
            yield batch
