"""TrainingLoop: read, score and train each batch on a step engine, call the callbacks, report, checkpoint.

One loop for a single process and for a cluster's trainer: plain Python
around the engine's step (step_engine.py), with reading and parsing run ahead
on the Prefetcher's thread. Whatever differs between the two (building and
restoring the model, the step, counts shared with other trainers, who writes
model_dir, waiting for the other trainers at the end) is the engine's.
"""
import dataclasses
import logging
import resource
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from easyonline.checkpoint.checkpointer import write_pipeline_config
from easyonline.checkpoint.interrupted_saves import remove_interrupted_saves
from easyonline.checkpoint.writer_lock import WriterLock
from easyonline.config.loader import to_text
from easyonline.config.secrets import apply_oss_config
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.callbacks import Callback, TrainerView
from easyonline.core.stop_signal import StopSignal
from easyonline.embedding.dynamic_tables import STATS_EPOCH
from easyonline.embedding.eviction import shrink_table, shrink_tables
from easyonline.embedding.size_bound import SizeBounds
from easyonline.features import build_feature_specs
from easyonline.inputs import Prefetcher
from easyonline.inputs.bad_input import BadInputMonitor
from easyonline.inputs.build_source import build_dead_letter, build_parser, stream_topic
from easyonline.inputs.raw_batch import BatchSource
from easyonline.protos import pipeline_pb2
from easyonline.publish.snapshot import TableRows
from easyonline.train.status import StatusReporter
from easyonline.train.step_engine import LoopState, StepEngine
from easyonline.train.task_figures import TaskFigures, summary_lines

tf = ensure_legacy_keras()
log = logging.getLogger(__name__)
TRIM_LOG_SECS = 60.0  # trims to max_size are logged at most this often (summed)
TICK_SECS = 0.5  # the loop ticks at least this often while no batch comes (Callback.on_tick)


@dataclasses.dataclass
class TrainSummary:
    steps: int
    samples: int
    seconds: float
    samples_per_sec: float
    auc: Optional[float]
    logloss: Optional[float]
    rejected: int
    table_sizes: Dict[str, int]
    positions: Dict[int, int]
    checkpoint: Optional[str]
    stop_reason: str
    cpu_seconds: float = 0.0  # of this process and its input reader, over the run
    start: str = ""  # where reading started, and every partition moved at the start (start_position.py)
    offsets_skipped: int = 0  # by Kafka positions out of range, at the start and while reading (kafka_input.py)
    #: every task's window figures by task name (train/task_figures.py); ``auc``/``logloss`` are the primary
    #: task's when it is binary (None when it is a regression)
    tasks: TaskFigures = dataclasses.field(default_factory=dict)
    #: False for a file input: no Kafka positions or offsets to print (they read "positions {1: 0}")
    kafka_input: bool = True

    def lines(self) -> List[str]:
        fmt = lambda v: "-" if v is None else f"{v:.4f}"
        single_binary = not self.tasks or (len(self.tasks) == 1 and "auc" in next(iter(self.tasks.values())))
        figures = [f"window AUC       {fmt(self.auc)}",
                   f"window logloss   {fmt(self.logloss)}"] if single_binary else summary_lines(self.tasks)
        return [f"steps            {self.steps}",
                f"samples          {self.samples}",
                f"seconds          {self.seconds:.1f}",
                f"samples/s        {self.samples_per_sec:.0f}",
                *figures,
                f"rejected lines   {self.rejected}",
                f"table keys       {sum(self.table_sizes.values())}",
                *([f"positions        {self.positions}"] if self.kafka_input else []),
                f"checkpoint       {self.checkpoint}",
                f"stopped because  {self.stop_reason}",
                f"cpu seconds      {self.cpu_seconds:.1f}",
                f"started from     {self.start or '-'}",
                *([f"offsets skipped  {self.offsets_skipped} (positions out of range at the start or while reading)"]
                  if self.kafka_input else [])]


def cpu_seconds() -> float:
    """CPU time of this process and of its children that have ended (the input reader, once closed)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


class TrainingLoop:
    """Trains the config's model from a source of batches on the engine ``make_engine`` builds, calling
    ``callbacks`` (and only those); the ``TrainerView`` callbacks receive.

    ``make_engine`` gets the loop's state (``LoopState``: the config, specs, clock, stop signal...) once it is
    made. ``train.trainer.OnlineTrainer`` and ``distributed.cluster_trainer.ClusterTrainer`` are this loop on
    their engines.
    """

    writer_lock: Optional[WriterLock] = None  # model_dir's lease while ``run`` holds it
    last_checkpoint: Optional[str]  # the newest checkpoint's path (written or restored), or None

    def __init__(self, config: pipeline_pb2.PipelineConfig, online: bool, source: Optional[BatchSource],
                 callbacks: Sequence[Callback], make_engine: Callable[[LoopState], StepEngine]):
        self.config = config
        self.online = online
        apply_oss_config(config)
        self.specs = build_feature_specs(config)
        self.parser = build_parser(config, self.specs)
        tf.keras.utils.set_random_seed(config.train_config.seed)
        self.callbacks: List[Callback] = list(callbacks)
        self.stop_signal = StopSignal()
        self.clock: Callable[[], float] = time.time  # the clock of the id statistics and schedules; tests may replace it
        self._source = source
        self.source: Optional[BatchSource] = None
        self.positions: Dict[int, int] = {}
        self.lag: Optional[int] = None
        self.bad_input = BadInputMonitor(config.data_config, build_dead_letter(config))
        self.input_wait_seconds = 0.0  # time the loop waited for the next batch: high = input-bound
        # Kafka offsets skipped by positions out of range at the start and while reading (the source's
        # ``offsets_skipped``, then RawBatch.offsets_skipped, which counts from it)
        self.offsets_skipped = 0
        self.topic_id = ""  # Kafka's id of the topic ``positions`` are offsets of (saved with them)
        self.evicted: Dict[str, np.ndarray] = {}  # keys evicted since start, per table (for publishing deletes)
        self.last_checkpoint = None
        self.engine = make_engine(self)
        # the engine's parts, as callbacks read them (the engine's own objects)
        self.model = self.engine.model
        self.task = self.model.tasks.primary
        self.optimizer = self.engine.optimizer
        self.checkpointer = self.engine.checkpointer
        self.metrics = self.engine.metrics
        self.changes = self.engine.changes
        self.restored_from = self.engine.restored_from  # the checkpoint this run started from, or None
        self.last_checkpoint = self.restored_from
        # tables with an eviction max_size, kept within it between shrinks (embedding/size_bound.py); by the
        # process that writes model_dir and publishes (a cluster's chief)
        self.size_bounds = SizeBounds(self.specs, self.engine.trainers)
        self.trims = 0  # trims to max_size that evicted rows, since start
        self._trimmed: Dict[str, int] = {}  # rows trimmed per table since the last log line about them
        self._trim_log_at = 0.0

    # --- what callbacks read and call ------------------------------------------------------
    @property
    def step(self) -> int:
        """Batches trained so far (a cluster's: every trainer's, as of this trainer's last step or status)."""
        return self.engine.step

    @property
    def rejected(self) -> int:
        """Samples (and messages) rejected since start; by kind in ``bad_input.counts``."""
        return self.bad_input.total

    @property
    def last_saved_step(self) -> int:
        return self.engine.last_saved_step

    def samples_trained(self) -> int:
        """Samples trained since the model began (restored with the checkpoint; a cluster's: every trainer's)."""
        return self.engine.samples_trained()

    def status_dir(self) -> str:
        return self.engine.status_dir()

    def table_sizes(self) -> Dict[str, int]:
        return self.engine.table_sizes()

    def table_rows(self) -> TableRows:
        """The tables, for publishing and base/delta saves (thread-safe reads; a cluster's through the
        chief's session)."""
        return self.engine.table_rows()

    def read_variables(self, variables: Dict) -> Dict:
        """The current values of ``variables`` (a dict of the model's variables), as numpy."""
        return self.engine.read_variables(variables)

    def read_step(self) -> int:
        """The step now (a cluster's: read from its ps at this call)."""
        return self.engine.read_step()

    def shrink(self) -> Dict[str, np.ndarray]:
        """Evicts per the tables' eviction policies now; returns {table: evicted keys}, also kept in ``evicted``."""
        evicted = shrink_tables(self.model.tables, self.clock() - STATS_EPOCH,
                                self.config.train_config.seconds_per_day, self.engine.table_ops())
        self._record_evicted(evicted)
        if evicted:
            log.info("shrink evicted %s", {t: len(k) for t, k in evicted.items()})
            self.dispatch("on_shrink", evicted)
        return evicted

    def evict_over_max_size(self, exact: bool = False) -> Dict[str, np.ndarray]:
        """Trims every table above its ``max_size`` ceiling (``exact``: above max_size) back to max_size, ranked
        as a shrink ranks, without its decay or delete rules (embedding/size_bound.py); returns {table:
        evicted keys}, published as deletes like a shrink's. Nothing in a cluster's other trainers."""
        if not self.size_bounds or not self.engine.writes_model_dir:
            return {}
        tables = list(self.size_bounds.limits)
        sizes = self.engine.bounded_sizes(tables)
        over = self.size_bounds.over(sizes, exact)
        evicted = {table: shrink_table(self.model.tables, table, 0.0, 1.0, self.engine.table_ops(), cap_only=True)
                   for table in over}
        if over:
            sizes = self.engine.bounded_sizes(tables)
        self.size_bounds.measured(sizes)
        evicted = {table: keys for table, keys in evicted.items() if len(keys)}
        self._record_evicted(evicted)
        if evicted:
            self.trims += 1
            for table, keys in evicted.items():
                self._trimmed[table] = self._trimmed.get(table, 0) + len(keys)
            if time.time() >= self._trim_log_at:  # the first trim, then at most once a minute: they may be many
                log.info("trim to max_size evicted %s rows (%d trims since start)", self._trimmed, self.trims)
                self._trimmed, self._trim_log_at = {}, time.time() + TRIM_LOG_SECS
            self.dispatch("on_shrink", evicted)
        return evicted

    def _record_evicted(self, evicted: Dict[str, np.ndarray]) -> None:
        """Keeps the keys in ``evicted`` and records them as deletes for publishing and deltas."""
        for table, keys in evicted.items():
            self.evicted[table] = np.union1d(self.evicted.get(table, np.zeros(0, np.int64)), keys)
        self.changes.record_deleted(evicted)

    def save_checkpoint(self) -> Optional[str]:
        """Checkpoints the model with the positions every update in it is after, then commits them to the
        source. A process that does not write model_dir (a cluster's worker) returns the last one it knows."""
        if not self.engine.writes_model_dir:
            return self.last_checkpoint
        self._check_writer_lock()
        self.evict_over_max_size(exact=True)  # a checkpoint (and an export of it) holds at most max_size rows
        path, positions = self.engine.save(self.positions, stream_topic(self.config), self.topic_id)
        if self.source is not None:
            self.source.commit(positions)
        self.last_checkpoint = path
        self.dispatch("on_checkpoint", path)
        return path

    # --- the loop -----------------------------------------------------------------
    def stop(self, reason: str) -> None:
        """Asks the loop to stop after the current batch (safe from callbacks and other threads)."""
        self.stop_signal.request(reason)

    def dispatch(self, hook: str, *args) -> None:
        """Calls ``hook`` on every callback, in order (callbacks may dispatch their own events)."""
        view: TrainerView = self  # (so mypy checks that the loop is the view callbacks are typed against)
        for callback in self.callbacks:
            getattr(callback, hook)(view, *args)

    def _next_tick_in(self) -> float:
        """How long the loop waits for a batch before it ticks anyway: half a second, or less when a
        callback's time-based work is due sooner (a caught-up trainer's next publish, for example)."""
        view: TrainerView = self
        due = [wait for wait in (callback.next_tick_in(view) for callback in self.callbacks) if wait is not None]
        return min([TICK_SECS] + [max(wait, 0.0) for wait in due])

    def make_source(self) -> BatchSource:
        """The configured input (a cluster trainer's share of it), from the restored or shared positions."""
        return self.engine.make_source()

    def _report(self, status: StatusReporter, last: Dict[str, float]) -> None:
        self.engine.refresh()
        now = time.perf_counter()
        wait_share = (self.input_wait_seconds - last["wait"]) / max(now - last["time"], 1e-9)
        last["wait"], last["time"] = self.input_wait_seconds, now
        fields = {"input_wait": f"{wait_share:.0%}", **self.bad_input.status_fields()}
        if self.offsets_skipped:  # a position fell out of range (at start or while reading): samples never trained
            fields["offsets_skipped"] = str(self.offsets_skipped)
        for callback in self.callbacks:
            fields.update(callback.status_fields())
        tasks = self.engine.task_figures()
        primary = next(iter(tasks.values()))
        logs = status.report(self.step, self.samples_trained(), self.engine.status_lag(self.lag), primary.get("auc"),
                             primary.get("logloss"), primary.get("ctr"), self.table_sizes(), self.rejected,
                             extra=" ".join(f"{k}={v}" for k, v in fields.items()), tasks=tasks)
        logs.update(fields)
        logs["input_wait"] = wait_share
        logs["offsets_skipped"] = self.offsets_skipped
        self.dispatch("on_metrics", logs)

    def _check_writer_lock(self) -> None:
        """Raises ModelDirLockedError when another trainer took model_dir over (never write beside it);
        renews the lease first unless it was confirmed lately (before a checkpoint)."""
        if self.writer_lock is not None:
            self.writer_lock.confirm()

    def run(self) -> TrainSummary:
        """Trains until the input ends (offline), num_steps, or a stop; returns the summary.

        Holds model_dir's writer lock meanwhile: a second trainer on it stops (exit code 6).
        """
        self.writer_lock = WriterLock(self.config.model_dir) if self.engine.writes_model_dir else None
        if self.writer_lock is not None:
            self.writer_lock.acquire()
        try:
            return self._run_holding_the_lock()
        finally:
            if self.writer_lock is not None:
                self.writer_lock.release()

    def _run_holding_the_lock(self) -> TrainSummary:
        config, train = self.config, self.config.train_config
        if self.writer_lock is not None:  # model_dir is this trainer's: no save of another is in progress
            remove_interrupted_saves(self.checkpointer.local_dir)
        write_pipeline_config(config.model_dir, to_text(config))
        self.stop_signal.install_signal_handlers()
        source = self.source = self._source or self.make_source()
        prefetcher = Prefetcher(source, lambda raw: raw.parsed if raw.parsed is not None
                                else self.parser.parse(raw.lines))
        start_time, start_cpu = time.time(), cpu_seconds()
        start_samples = self.engine.samples_at_start()
        status = StatusReporter(train.log_step_count_secs, self.engine.status_dir(), start_samples)
        self.positions = dict(source.start_offsets)
        self.topic_id = source.topic_id
        self.offsets_skipped = source.offsets_skipped
        self.lag = None
        last = {"wait": 0.0, "time": time.perf_counter()}
        stop_reason = "input ended"
        self.dispatch("on_train_begin")
        try:
            while True:
                if self.writer_lock is not None:  # (no file read) lost to another trainer: stop now, as at a save
                    self.writer_lock.check()
                if self.stop_signal.should_stop():
                    stop_reason = self.stop_signal.reason
                    break
                if train.num_steps and self.step >= train.num_steps:
                    stop_reason = f"reached num_steps={train.num_steps}"
                    break
                waited = time.perf_counter()
                item = prefetcher.get(timeout=self._next_tick_in())
                self.input_wait_seconds += time.perf_counter() - waited
                if item is None:
                    if prefetcher.done:
                        break
                    if prefetcher.caught_up():
                        self.lag = 0  # the status line shows it even when no batch came in a while
                    if not self.online and self.lag == 0:
                        stop_reason = "caught up with the topic (offline run)"
                        break
                else:
                    self._train_item(*item)
                self.dispatch("on_tick")
                if status.due():
                    self._report(status, last)
        finally:
            prefetcher.close(close_source=False)
            status.close()
            self.bad_input.close()
            try:
                final_positions = self.engine.before_final_checkpoint(stop_reason)
                if final_positions is not None:
                    self.positions = final_positions
                if self.step != self.last_saved_step and self.engine.can_checkpoint:
                    self.save_checkpoint()
            finally:
                source.close()
        seconds = time.time() - start_time
        samples = self.samples_trained() - start_samples
        tasks = self.engine.task_figures()
        primary = next(iter(tasks.values()))
        summary = TrainSummary(self.step, samples, seconds, samples / max(seconds, 1e-9), primary.get("auc"),
                               primary.get("logloss"), self.rejected, self.table_sizes(), self.positions,
                               self.last_checkpoint, stop_reason, cpu_seconds() - start_cpu,
                               source.start_mode, self.offsets_skipped, tasks,
                               kafka_input=bool(stream_topic(self.config)))
        self.dispatch("on_train_end", summary)
        return summary

    def _train_item(self, raw, parsed) -> None:
        self.bad_input.record(parsed.size, raw.rejected + parsed.rejected, raw.empty_messages)
        probs = None
        if parsed.size:
            self.dispatch("on_batch_begin", raw, parsed)
            probs = self.engine.train_and_count(raw, parsed)
            features = parsed.host_features()
            self.changes.record_batch(features)
            if self.size_bounds.count(features):
                self.evict_over_max_size()
        else:
            self.engine.count(0)
        self.positions = raw.positions
        self.topic_id = raw.topic_id or self.topic_id
        self.lag = raw.lag
        self.offsets_skipped = max(self.offsets_skipped, raw.offsets_skipped)
        if probs is not None:
            self.dispatch("on_batch_end", raw, parsed, probs)
