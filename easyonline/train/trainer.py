"""OnlineTrainer: score each batch, train on it, checkpoint with positions, report.

The loop is plain Python around one ``tf.function`` step; reading and
parsing run ahead on the Prefetcher's thread. Every batch is scored before
it is trained on, so the windowed AUC and logloss are out-of-sample.
"""
import contextlib
import dataclasses
import logging
import resource
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from easyonline.checkpoint.checkpointer import Checkpointer, write_pipeline_config
from easyonline.checkpoint.restore import model_with_shards
from easyonline.checkpoint.writer_lock import WriterLock
from easyonline.config.loader import to_text
from easyonline.config.secrets import apply_oss_config
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.callbacks import Callback
from easyonline.core.errors import ConfigError
from easyonline.core.metrics import WindowFigures
from easyonline.core.stop_signal import StopSignal
from easyonline.embedding.change_tracker import ChangeTracker
from easyonline.embedding.dynamic_tables import STATS_EPOCH, checkpoint_shards
from easyonline.embedding.eviction import EagerTableOps, TableOps, shrink_tables
from easyonline.features import build_feature_specs
from easyonline.features.signature import empty_features, feature_signature
from easyonline.inputs import Prefetcher
from easyonline.inputs.bad_input import BadInputMonitor
from easyonline.inputs.build_source import build_dead_letter, build_parser, build_source, stream_topic
from easyonline.inputs.raw_batch import BatchSource
from easyonline.protos import pipeline_pb2
from easyonline.publish.snapshot import EagerTableRows, TableRows
from easyonline.train.optimizers import build_train_optimizer
from easyonline.train.status import StatusReporter
from easyonline.train.task_figures import TaskFigures, summary_lines
from easyonline.train.threading_config import apply_thread_config
from easyonline.utils import fileio

tf = ensure_legacy_keras()
log = logging.getLogger(__name__)


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
    offsets_skipped: int = 0  # by Kafka positions out of range while reading (kafka_input.py)
    #: every task's window figures by task name (train/task_figures.py); ``auc``/``logloss`` are the primary
    #: task's when it is binary (None when it is a regression)
    tasks: TaskFigures = dataclasses.field(default_factory=dict)

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
                f"positions        {self.positions}",
                f"checkpoint       {self.checkpoint}",
                f"stopped because  {self.stop_reason}",
                f"cpu seconds      {self.cpu_seconds:.1f}",
                f"started from     {self.start or '-'}",
                f"offsets skipped  {self.offsets_skipped} (positions out of range while reading)"]


def check_task_labels(task_labels: Sequence[str], label_fields: Sequence[str]) -> Tuple[str, ...]:
    """The labels the model's tasks learn from, each a ``data_config.label_fields`` entry (else ConfigError)."""
    missing = [name for name in task_labels if name not in label_fields]
    if missing:
        raise ConfigError("data_config.label_fields", f"the model's tasks learn from {missing}, which are not "
                          f"label fields (label_fields: {list(label_fields)})")
    return tuple(task_labels)


def cpu_seconds() -> float:
    """CPU time of this process and of its children that have ended (the input reader, once closed)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


class OnlineTrainer:
    """Trains the config's model from a source of batches, calling ``callbacks`` (and only those).

    ``easyonline.jobs.online_train.build_trainer`` adds the config's default
    callbacks (checkpoints, shrinks, the stop file, publishing, base/delta saves).
    """

    writer_lock: Optional[WriterLock] = None  # model_dir's lease while ``run`` holds it
    last_checkpoint: Optional[str]  # the newest checkpoint's path (written or restored), or None
    restored_from: Optional[str] = None  # the checkpoint this run started from (set by the restore), or None
    # Kafka offsets skipped by positions out of range while reading (RawBatch.offsets_skipped); a class
    # default too, for subclasses with their own __init__ (distributed/cluster_trainer.py).
    offsets_skipped: int = 0

    def __init__(self, config: pipeline_pb2.PipelineConfig, online: bool = True,
                 source: Optional[BatchSource] = None, callbacks: Sequence[Callback] = ()):
        apply_thread_config(config.train_config)
        self._init_loop(config, online, source, callbacks)
        latest = self._latest_local_checkpoint()
        saved_shards = checkpoint_shards(latest) if latest else None
        self.model = model_with_shards(config, self.specs, saved_shards or 1, scope=self._variable_scope())
        with self._variable_scope():
            self.optimizer = build_train_optimizer(config.train_config)
        self.task = self.model.tasks.primary
        self._label_names = check_task_labels(self.model.tasks.label_names, self.specs.label_names)
        # a batch the reader parsed into arrays carries the first label field only
        self._vectors_fit = self._label_names == self.specs.label_names[:1]
        shards = len(self.model.tables.devices or [""])
        if saved_shards and shards != saved_shards:
            raise ConfigError("TF_CONFIG.cluster.ps", f"the checkpoint in {config.model_dir} has {saved_shards} "
                              f"shard(s) per table (written by {saved_shards} ps), this cluster has {shards} ps: "
                              "restart with as many ps as wrote it")
        train = config.train_config
        fileio.makedirs(config.model_dir)
        self.checkpointer = Checkpointer(config.model_dir, self.model, self.optimizer, train.keep_checkpoint_max)
        self.metrics: WindowFigures = self.task.metrics  # the primary task's (callers read it; figures() by name)
        self.changes = ChangeTracker(self.specs)  # fed once per batch; publishing and saves subscribe
        signature = feature_signature(self.specs)
        label_spec = {name: tf.TensorSpec([None], tf.float32) for name in self._label_names}
        # data_config.sample_weight: the step takes the batch's weights [B] too
        weight_spec = [tf.TensorSpec([None], tf.float32)] if self.specs.sample_weight else []
        # autograph=False: the step has no tensor-dependent Python control flow, and autograph
        # converting TFRA's optimizer code takes ~2 s per table at every trace.
        self._train_step = tf.function(self._distribute(self._weighted_step_impl if self.specs.sample_weight
                                                        else self._unweighted_step_impl),
                                       input_signature=[signature, label_spec, tf.TensorSpec([], tf.float64),
                                                        *weight_spec],
                                       autograph=False)
        self._score_step = tf.function(self._distribute(self._score_impl), input_signature=[signature],
                                       autograph=False)
        self._concrete_steps: Dict[int, Any] = {}
        self._vector_steps: Dict[Tuple[Tuple[str, ...], Tuple[str, ...]], Any] = {}
        self._table_rows: Optional[TableRows] = None
        self._build_variables()
        self.restored_from = self._restore()
        self.last_checkpoint = self.restored_from
        # Counted in Python and written to the checkpoint's variables when it is saved: two variable
        # assignments per step were ~5% of the training thread's time at 90 steps/s.
        self.step = int(self.checkpointer.step.numpy())
        self._samples = int(self.checkpointer.samples.numpy())

    def _init_loop(self, config: pipeline_pb2.PipelineConfig, online: bool, source: Optional[BatchSource],
                   callbacks: Sequence[Callback]) -> None:
        """The training loop's own state, the same whichever way steps run (a cluster trainer's too, which
        builds its model in a graph instead of calling ``__init__``)."""
        self.config = config
        self.online = online
        apply_oss_config(config)
        self.specs = build_feature_specs(config)
        self.parser = build_parser(config, self.specs)
        tf.keras.utils.set_random_seed(config.train_config.seed)
        self.callbacks: List[Callback] = list(callbacks)
        self.stop_signal = StopSignal()
        self.clock = time.time  # the clock of the id statistics and schedules; tests may replace it
        self._source = source
        self.source: Optional[BatchSource] = None
        self.positions: Dict[int, int] = {}
        self.lag: Optional[int] = None
        self.bad_input = BadInputMonitor(config.data_config, build_dead_letter(config))
        self.input_wait_seconds = 0.0  # time the loop waited for the next batch: high = input-bound
        self.offsets_skipped = 0
        self.can_checkpoint = True  # False once the parameters are lost (a parameter server died)
        self.evicted: Dict[str, np.ndarray] = {}  # keys evicted since start, per table (for publishing deletes)
        self.last_checkpoint = None

    # --- where the step runs (hooks for trainers that place variables elsewhere) ---
    def _latest_local_checkpoint(self) -> Optional[str]:
        """The checkpoint this run will restore when model_dir is local (the model is shaped like it), else None."""
        if fileio.is_oss(self.config.model_dir) or not tf.io.gfile.isdir(self.config.model_dir):
            return None
        return tf.train.latest_checkpoint(self.config.model_dir)

    def _variable_scope(self):
        """The context the model and optimizer are built in."""
        return contextlib.nullcontext()

    def _distribute(self, step_fn):
        """Wraps a step function for how steps run (here: as it is, in this process)."""
        return step_fn

    def _run(self, step, *args) -> Any:
        """Runs a traced step; returns its output as numpy.

        Through the step's concrete function: its input signature is fixed, so tf.function's matching of
        the arguments against its traces (~0.5 ms a call with ragged features) is skipped, a third of
        the step's time at batch sizes of a few samples.
        """
        concrete = self._concrete_steps.get(id(step))
        if concrete is None:
            concrete = self._concrete_steps[id(step)] = step.get_concrete_function()
        out = concrete(*args)
        return {name: value.numpy() for name, value in out.items()} if isinstance(out, dict) else out.numpy()

    # --- the step -----------------------------------------------------------------
    def _unweighted_step_impl(self, features, labels, now):
        return self._train_step_impl(features, labels, now, None)

    def _weighted_step_impl(self, features, labels, now, sample_weight):
        return self._train_step_impl(features, labels, now, sample_weight)

    def _train_step_impl(self, features, labels, now, sample_weight):
        with tf.GradientTape() as tape:
            loss, logits = self.model.compute_loss(features, labels, training=True, now=now,
                                                   sample_weight=sample_weight)
        variables = self.model.trainable_variables
        gradients = tape.gradient(loss, variables)
        self.optimizer.apply_gradients(zip(gradients, variables))
        return logits

    def _score_impl(self, features):
        return self.model.task_logits(self.model(features, training=False))

    def _build_variables(self) -> None:
        """Creates every variable and optimizer slot (an empty batch changes nothing) so restore is exact."""
        self._train_step_impl(empty_features(self.specs), {name: tf.zeros([0], tf.float32) for name in self._label_names},
                              self._now(), tf.zeros([0], tf.float32) if self.specs.sample_weight else None)
        # (eagerly: the traced step is then traced once)
        self.model.tables.release_names()  # the optimizer's slot tables now exist

    def _restore(self) -> Optional[str]:
        path = self.checkpointer.restore_latest()
        if path is None and self.config.train_config.fine_tune_checkpoint:
            path = self.checkpointer.init_from(self.config.train_config.fine_tune_checkpoint)
        return path

    # --- helpers ------------------------------------------------------------------
    @property
    def rejected(self) -> int:
        """Samples (and messages) rejected since start; by kind in ``bad_input.counts``."""
        return self.bad_input.total

    def _now(self) -> tf.Tensor:
        """The clock of the id statistics, as seconds since STATS_EPOCH; ``self.clock`` may be replaced in tests."""
        return tf.constant(self.clock() - STATS_EPOCH, tf.float64)

    def shrink(self) -> Dict[str, np.ndarray]:
        """Evicts per the tables' eviction policies now; returns {table: evicted keys}, also kept in ``evicted``."""
        evicted = shrink_tables(self.model.tables, self.clock() - STATS_EPOCH,
                                self.config.train_config.seconds_per_day, self._table_ops())
        for table, keys in evicted.items():
            self.evicted[table] = np.union1d(self.evicted.get(table, np.zeros(0, np.int64)), keys)
        self.changes.record_deleted(evicted)
        if evicted:
            log.info("shrink evicted %s", {t: len(k) for t, k in evicted.items()})
            self.dispatch("on_shrink", evicted)
        return evicted

    def make_source(self) -> BatchSource:
        """The configured input, from the restored checkpoint's positions (they win over the config's)."""
        if not self.checkpointer.manager.latest_checkpoint:
            return build_source(self.config, self.specs)
        return build_source(self.config, self.specs, self.checkpointer.positions,
                            positions_topic=self.checkpointer.positions_topic)

    @property
    def last_saved_step(self) -> int:
        return self.checkpointer.last_saved_step

    def samples_trained(self) -> int:
        """Samples trained since the model began (restored with the checkpoint)."""
        return self._samples

    def task_figures(self) -> TaskFigures:
        """Every task's window figures by task name, the primary first (a cluster reads its shared ones)."""
        return {task.name: task.metrics.figures() for task in self.model.tasks}

    def _status_lag(self) -> Optional[int]:
        """The lag the status line shows (a cluster shows all its trainers')."""
        return self.lag

    def _step_at_start(self) -> int:
        """The step this run starts from (the restored checkpoint's, or where an earlier run stopped)."""
        return self.step

    def _samples_at_start(self) -> int:
        """What ``samples_trained`` was when this run began (its summary counts from there)."""
        return self.samples_trained()

    def _status_dir(self) -> str:
        """Where the status figures go for TensorBoard."""
        return fileio.join(self.checkpointer.local_dir, "train")

    def _before_final_checkpoint(self, stop_reason: str) -> None:
        """Called once the loop has ended, before the final checkpoint (a cluster waits for its trainers)."""

    def _table_ops(self) -> TableOps:
        """How eviction reads and writes the tables."""
        return EagerTableOps()

    def table_rows(self) -> TableRows:
        """The tables, for publishing and base/delta saves (thread-safe reads); one reader for both, so its
        lookup over every table is traced once."""
        if self._table_rows is None:
            self._table_rows = EagerTableRows(self.model.tables)
        return self._table_rows

    def read_variables(self, variables: Dict) -> Dict:
        """The current values of ``variables`` (a dict of the model's variables), as numpy."""
        return {key: var.numpy() for key, var in variables.items()}

    def table_sizes(self) -> Dict[str, int]:
        return self.model.tables.sizes()

    def train_batch(self, features, labels, sample_weight=None) -> Dict[str, np.ndarray]:
        """Scores then trains one parsed batch; returns each task's pre-update predictions, by task name.

        ``labels``: {label name: [B]} with each label the model's tasks learn from, or the [B] of the first.
        ``sample_weight``: the batch's [B] weights when data_config.sample_weight names a field (required
        then), else None.
        """
        if not isinstance(labels, dict):
            labels = {self._label_names[0]: labels}
        if self.specs.sample_weight and sample_weight is None:
            raise ValueError(f"data_config.sample_weight is {self.specs.sample_weight!r} but the batch has no weights")
        weights = () if not self.specs.sample_weight else (np.asarray(sample_weight, np.float32),)
        if self.model.scores_differ_in_training:
            logits = self._run(self._score_step, features)
            self._run(self._train_step, features, labels, self._now(), *weights)
        else:
            logits = self._run(self._train_step, features, labels, self._now(), *weights)
        return {task.name: task.predictions(logits[task.name]) for task in self.model.tasks}

    def train_vectors(self, vectors) -> Dict[str, np.ndarray]:
        """``train_batch`` of a batch parsed into arrays (``vector_csv.VectorBatch``): they go into the step
        whole and are split into features inside it."""
        step = self._vector_steps.get((vectors.id_names, vectors.dense_names))
        if step is None:
            step = self._trace_vector_step(vectors.id_names, vectors.dense_names)
        logits = step(vectors.ids, vectors.dense, vectors.labels, self._now())
        return {task.name: task.predictions(logits[task.name].numpy()) for task in self.model.tasks}

    def _trace_vector_step(self, id_names: Tuple[str, ...], dense_names: Tuple[str, ...]):
        def step(ids, dense, labels, now):
            features = dict(zip(id_names, tf.unstack(ids, len(id_names), axis=1)))
            features.update(zip(dense_names, tf.unstack(dense, len(dense_names), axis=1)))
            return self._train_step_impl(features, {self._label_names[0]: labels}, now, None)

        signature = [tf.TensorSpec([None, len(id_names)], tf.int64), tf.TensorSpec([None, len(dense_names)], tf.float32),
                     tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.float64)]
        concrete = tf.function(self._distribute(step), input_signature=signature,
                               autograph=False).get_concrete_function()
        self._vector_steps[(id_names, dense_names)] = concrete
        return concrete

    def _train_and_count(self, raw, parsed) -> np.ndarray:
        """Scores and trains a non-empty batch, adds it to the metrics and counts; returns its probabilities."""
        predictions: Dict[str, np.ndarray]
        if parsed.vectors is not None and self._vectors_fit and not self.model.scores_differ_in_training:
            predictions = self.train_vectors(parsed.vectors)
            labels = {self._label_names[0]: parsed.vectors.labels}
        else:
            by_name = parsed.labels_by_name(self.specs.label_names[0])
            labels = {name: np.asarray(by_name[name]) for name in self._label_names}
            predictions = self.train_batch(parsed.features, labels, parsed.sample_weights)
        for task in self.model.tasks:
            task.update_metrics(labels[task.label_name], predictions[task.name])
        self._count(parsed.size)
        return predictions[self.task.name]

    def _count(self, samples: int) -> None:
        """One more step (a batch, even an empty one) of ``samples`` samples."""
        self.step += 1
        self._samples += samples

    def save_checkpoint(self) -> Optional[str]:
        """Checkpoints the model with the positions after the last trained batch, then commits them."""
        self._check_writer_lock()
        self.checkpointer.step.assign(self.step)
        self.checkpointer.samples.assign(self.samples_trained())
        path = self.checkpointer.save(self.positions, stream_topic(self.config))
        if self.source is not None:
            self.source.commit(self.positions)
        self.last_checkpoint = path
        log.info("saved checkpoint %s", path)
        self.dispatch("on_checkpoint", path)
        return path

    # --- the loop -----------------------------------------------------------------
    def stop(self, reason: str) -> None:
        """Asks the loop to stop after the current batch (safe from callbacks and other threads)."""
        self.stop_signal.request(reason)

    def dispatch(self, hook: str, *args) -> None:
        """Calls ``hook`` on every callback, in order (callbacks may dispatch their own events)."""
        for callback in self.callbacks:
            getattr(callback, hook)(self, *args)

    def _report(self, status: StatusReporter, last: Dict[str, float]) -> None:
        now = time.perf_counter()
        wait_share = (self.input_wait_seconds - last["wait"]) / max(now - last["time"], 1e-9)
        last["wait"], last["time"] = self.input_wait_seconds, now
        fields = {"input_wait": f"{wait_share:.0%}", **self.bad_input.status_fields()}
        if self.offsets_skipped:  # a position fell out of range while reading: samples never trained
            fields["offsets_skipped"] = str(self.offsets_skipped)
        for callback in self.callbacks:
            fields.update(callback.status_fields())
        tasks = self.task_figures()
        primary = next(iter(tasks.values()))
        logs = status.report(self.step, self.samples_trained(), self._status_lag(), primary.get("auc"),
                             primary.get("logloss"), primary.get("ctr"), self.table_sizes(), self.rejected,
                             extra=" ".join(f"{k}={v}" for k, v in fields.items()), tasks=tasks)
        logs.update(fields)
        logs["input_wait"] = wait_share
        self.dispatch("on_metrics", logs)

    def _check_writer_lock(self) -> None:
        """Raises ModelDirLockedError when another trainer took model_dir over (never write beside it)."""
        if self.writer_lock is not None:
            self.writer_lock.check()

    def _writes_model_dir(self) -> bool:
        """Whether this trainer writes checkpoints and updates to model_dir (and so holds its lock)."""
        return True

    def run(self) -> TrainSummary:
        """Trains until the input ends (offline), num_steps, or a stop; returns the summary.

        Holds model_dir's writer lock meanwhile: a second trainer on it stops (exit code 6).
        """
        self.writer_lock = WriterLock(self.config.model_dir) if self._writes_model_dir() else None
        if self.writer_lock is not None:
            self.writer_lock.acquire()
        try:
            return self._run_holding_the_lock()
        finally:
            if self.writer_lock is not None:
                self.writer_lock.release()

    def _run_holding_the_lock(self) -> TrainSummary:
        config, train = self.config, self.config.train_config
        write_pipeline_config(config.model_dir, to_text(config))
        self.stop_signal.install_signal_handlers()
        source = self.source = self._source or self.make_source()
        prefetcher = Prefetcher(source, lambda raw: raw.parsed if raw.parsed is not None
                                else self.parser.parse(raw.lines))
        status = StatusReporter(train.log_step_count_secs, self._status_dir())
        start_time, start_cpu = time.time(), cpu_seconds()
        start_samples = self._samples_at_start()
        self.positions = dict(source.start_offsets)
        self.step = self._step_at_start()
        self.lag = None
        last = {"wait": 0.0, "time": time.perf_counter()}
        stop_reason = "input ended"
        self.dispatch("on_train_begin")
        try:
            while True:
                if self.stop_signal.should_stop():
                    stop_reason = self.stop_signal.reason
                    break
                if train.num_steps and self.step >= train.num_steps:
                    stop_reason = f"reached num_steps={train.num_steps}"
                    break
                waited = time.perf_counter()
                item = prefetcher.get(timeout=0.5)
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
                self._before_final_checkpoint(stop_reason)
                if self.step != self.last_saved_step and self.can_checkpoint:
                    self.save_checkpoint()
            finally:
                source.close()
        seconds = time.time() - start_time
        samples = self.samples_trained() - start_samples
        tasks = self.task_figures()
        primary = next(iter(tasks.values()))
        summary = TrainSummary(self.step, samples, seconds, samples / max(seconds, 1e-9), primary.get("auc"),
                               primary.get("logloss"), self.rejected, self.table_sizes(), self.positions,
                               self.last_checkpoint, stop_reason, cpu_seconds() - start_cpu,
                               source.start_mode, self.offsets_skipped, tasks)
        self.dispatch("on_train_end", summary)
        return summary

    def _train_item(self, raw, parsed) -> None:
        self.bad_input.record(parsed.size, raw.rejected + parsed.rejected, raw.empty_messages)
        probs = None
        if parsed.size:
            probs = self._train_and_count(raw, parsed)
            self.changes.record_batch(parsed.host_features())
        else:
            self._count(0)
        self.positions = raw.positions
        self.lag = raw.lag
        self.offsets_skipped = max(self.offsets_skipped, raw.offsets_skipped)
        if probs is not None:
            self.dispatch("on_batch_end", raw, parsed, probs)
