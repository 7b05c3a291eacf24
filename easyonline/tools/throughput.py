"""Training samples/s of a config, from arrays in memory (the step's ceiling) and from a broker, in one process.

How the throughput benches (tools/bench/online_throughput.py, incremental_publish.py, apache_kafka_costs.py,
serving_freshness.py, update_sink_outage.py) set up and time training, in one place instead of scripts
borrowing from one another, and how a user can time their own config against their broker: ``throughput_config`` sets a config
up for a timed run (status every 5 s, no checkpoint but the closing one, no publishing), ``Timer`` times the
batches after the warm-up ones (the first traces the step), ``from_memory`` trains given lines from arrays
already parsed and ``from_broker`` trains the config's topic to its end (what a reader or a broker process
spent: ``easyonline.utils.child_process.process_cpu_seconds``).
"""
import time
from typing import Any, List, Optional, Tuple

from easyonline.config.validate import validate_pipeline_config
from easyonline.core.callbacks import Callback
from easyonline.features.csv_parser import ParsedBatch
from easyonline.features.vector_csv import VectorCsvParser
from easyonline.inputs.raw_batch import BatchSource, RawBatch
from easyonline.jobs.online_train import build_trainer
from easyonline.protos import pipeline_pb2

WARMUP_BATCHES = 5  # batches not timed: the first traces the step, the next few warm the tables up


class Timer(Callback):
    """Times batches after the warm-up ones (the first includes tracing the step)."""

    def __init__(self) -> None:
        self.batches = 0
        self.samples = 0
        self.start = self.end = 0.0
        self.wait_start = self.wait_end = 0.0
        self.cpu_start = self.cpu_end = 0.0  # this process's CPU (every thread; not the reader process's)

    def waited_share(self) -> float:
        """Share of the timed window the trainer spent waiting for its next batch."""
        return (self.wait_end - self.wait_start) / (self.end - self.start)

    def cpu_us_per_sample(self) -> float:
        """The trainer process's CPU per sample over the timed window: what a slower machine's speed, or
        other processes on this one, move far less than the wall-clock rate."""
        return 1e6 * (self.cpu_end - self.cpu_start) / self.samples

    def on_batch_end(self, trainer, raw_batch, parsed_batch, probs) -> None:
        self.batches += 1
        if self.batches == WARMUP_BATCHES:
            self.start = time.perf_counter()
            self.cpu_start = time.process_time()
            self.wait_start = getattr(trainer, "input_wait_seconds", 0.0)
        elif self.batches > WARMUP_BATCHES:
            self.samples += parsed_batch.size
            self.end = time.perf_counter()
            self.cpu_end = time.process_time()
            self.wait_end = getattr(trainer, "input_wait_seconds", 0.0)

    def rate(self) -> float:
        """Samples/s over the timed window."""
        return self.samples / (self.end - self.start)


def throughput_config(config: pipeline_pb2.PipelineConfig, model_dir: str, server: str = "", topic: str = "",
                      client: str = "") -> pipeline_pb2.PipelineConfig:
    """``config`` (changed in place) for a timed run into ``model_dir``: a status line every 5 s, no checkpoint
    but the closing one, no publishing (the publishing bench adds its own); reading ``topic`` on ``server``
    with ``client`` (a ``kafka_train_input.client`` name; '' keeps the config's) when given. Validated."""
    config.model_dir = model_dir
    config.train_config.log_step_count_secs = 5
    config.train_config.save_checkpoints_secs = 0
    config.train_config.ClearField("incr_save_config")
    if server:
        config.kafka_train_input.server, config.kafka_train_input.topic = server, topic
        if client:
            config.kafka_train_input.client = config.kafka_train_input.Client.Value(client)
    validate_pipeline_config(config, online=False)
    return config


def from_memory(config: pipeline_pb2.PipelineConfig, lines: List[bytes], batch_size: int,
                matrices: bool = True) -> float:
    """Samples/s of the training step alone, on ``lines`` parsed beforehand; ``matrices``: the step the broker
    runs use (the id and dense matrices whole), else the per-feature step."""
    trainer = build_trainer(config, online=False)
    if matrices:
        parser = VectorCsvParser(trainer.specs)
        batches = [ParsedBatch.from_vectors(parser.parse(lines[i:i + batch_size]))
                   for i in range(0, len(lines), batch_size)]
    else:
        batches = [trainer.parser.parse(lines[i:i + batch_size]) for i in range(0, len(lines), batch_size)]
    timer = Timer()
    for parsed in batches:
        # what the loop does per batch: the arrays' step when the batch has arrays, every task's metrics
        probs = trainer.engine.train_and_count(RawBatch([], {}), parsed)
        timer.on_batch_end(trainer, None, parsed, probs)
    return timer.rate()


def from_broker(config: pipeline_pb2.PipelineConfig,
                source: Optional[BatchSource] = None) -> Tuple[float, float, Any, float]:
    """Trains ``config`` from its topic to the end (offline mode), from ``source`` when given (e.g. a
    ``KafkaReaderProcess`` that leaves parsing to the trainer); returns (samples/s, the share of the time the
    trainer waited for input, the run's summary, the trainer's CPU microseconds per sample)."""
    timer = Timer()
    trainer = build_trainer(config, online=False, source=source, callbacks=[timer])
    summary = trainer.run()
    return timer.rate(), timer.waited_share(), summary, timer.cpu_us_per_sample()
