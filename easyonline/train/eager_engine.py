"""EagerEngine: the single process's steps, ``tf.function``s over this process's variables.

Every batch is scored before it is trained on (one step when scoring and
training agree, as without dropout or batch norm), so the windowed AUC and
logloss are out-of-sample. Steps and samples are counted in Python and
written to the checkpoint's variables when it is saved.
"""
import logging
import threading
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from easyonline.checkpoint.checkpointer import Checkpointer
from easyonline.checkpoint.restore import model_with_shards
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.errors import ConfigError
from easyonline.core.flat_call import flat_call
from easyonline.core.metrics import WindowFigures
from easyonline.embedding.change_tracker import ChangeTracker
from easyonline.embedding.dynamic_tables import STATS_EPOCH, checkpoint_tables
from easyonline.embedding.eviction import EagerTableOps, TableOps
from easyonline.embedding.rows_with_state import adam_state_in_rows, finish_restore
from easyonline.features.label_kinds import SAMPLE_WEIGHT_KEY
from easyonline.features.signature import empty_features, feature_signature
from easyonline.inputs.build_source import build_source
from easyonline.inputs.raw_batch import BatchSource
from easyonline.publish.snapshot import EagerTableRows, TableRows
from easyonline.train.optimizers import build_train_optimizer
from easyonline.train.step_engine import LoopState
from easyonline.train.table_adam import adopt_split_slots, keeps_slots_together, sparse_part
from easyonline.train.task_figures import TaskFigures
from easyonline.utils import fileio

tf = ensure_legacy_keras()
log = logging.getLogger(__name__)


def check_task_labels(task_labels: Sequence[str], label_fields: Sequence[str]) -> Tuple[str, ...]:
    """The labels the model's tasks learn from, each a ``data_config.label_fields`` entry (else ConfigError)."""
    missing = [name for name in task_labels if name not in label_fields]
    if missing:
        raise ConfigError("data_config.label_fields", f"the model's tasks learn from {missing}, which are not "
                          f"label fields (label_fields: {list(label_fields)})")
    return tuple(task_labels)


class EagerEngine:
    """Builds the config's model in this process, restores it, and runs its steps (a ``StepEngine``)."""

    writes_model_dir = True
    can_checkpoint = True
    trainers = 1

    def __init__(self, loop: LoopState):
        self._loop = loop
        config = self.config = loop.config
        self.specs = loop.specs
        latest = self._latest_local_checkpoint()
        saved = checkpoint_tables(latest) if latest else None
        saved_shards = saved.shards if saved else None
        self.optimizer = build_train_optimizer(config.train_config)
        # Tables sized for the checkpoint's rows: a restore of millions of rows skips the doublings. Adam's m
        # and v in the rows of the tables it updates (embedding/rows_with_state.py)
        state_in_rows = adam_state_in_rows() if keeps_slots_together(sparse_part(self.optimizer)) else None
        self.model = model_with_shards(config, self.specs, saved_shards or 1, scope=state_in_rows,
                                       rows=saved.rows if saved else None)
        self.task = self.model.tasks.primary
        self._label_names = check_task_labels(self.model.tasks.label_names, self.specs.label_names)
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
        self._train_step = tf.function(self._train_step_impl,
                                       input_signature=[signature, label_spec, tf.TensorSpec([], tf.float64),
                                                        *weight_spec],
                                       autograph=False)
        self._score_step = tf.function(self._score_impl, input_signature=[signature], autograph=False)
        self._concrete_steps: Dict[int, Any] = {}
        self._vector_steps: Dict[tuple, Any] = {}  # the traced step of each batch layout, called flat
        self._table_rows: Optional[TableRows] = None
        # Held while a step writes the tables: the publisher's and base saves' exports take it (publish/snapshot.py)
        self._writing = threading.Lock()
        self._sizes_steps: Dict[Tuple[str, ...], Any] = {}
        self._build_variables()
        self.restored_from = self._restore()
        # Counted in Python and written to the checkpoint's variables when it is saved: two variable
        # assignments per step were ~5% of the training thread's time at 90 steps/s.
        self.step = int(self.checkpointer.step.numpy())
        self._samples = int(self.checkpointer.samples.numpy())

    def _latest_local_checkpoint(self) -> Optional[str]:
        """The checkpoint this run will restore when model_dir is local (the model is shaped like it), else None."""
        if fileio.is_oss(self.config.model_dir) or not tf.io.gfile.isdir(self.config.model_dir):
            return None
        return tf.train.latest_checkpoint(self.config.model_dir)

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
    def _train_step_impl(self, features, labels, now, sample_weight=None):
        with tf.GradientTape() as tape:
            loss, logits = self.model.compute_loss(features, labels, training=True, now=now,
                                                   sample_weight=sample_weight)
        variables = self.model.trainable_variables
        gradients = tape.gradient(loss, variables)
        self.optimizer.apply_gradients(zip(gradients, variables))
        return logits

    def _score_impl(self, features):
        return self.model(features, training=False)

    def _build_variables(self) -> None:
        """Creates every variable and optimizer slot (an empty batch changes nothing) so restore is exact."""
        self._train_step_impl(empty_features(self.specs), {name: tf.zeros([0], tf.float32) for name in self._label_names},
                              self._now(), tf.zeros([0], tf.float32) if self.specs.sample_weight else None)
        # (eagerly: the traced step is then traced once)
        self.model.tables.release_names()  # the optimizer's slot tables now exist

    def _restore(self) -> Optional[str]:
        path = self.checkpointer.restore_latest()
        # (a table's rows and its m and v restore together, once both are read: rows_with_state.py)
        finish_restore(self.model.tables)
        fine_tune = self.config.train_config.fine_tune_checkpoint
        if path is not None:
            taken = adopt_split_slots(self.checkpointer.manager.latest_checkpoint, sparse_part(self.optimizer),
                                      self.model.tables.embeddings)
            if taken:
                log.info("took Adam's m and v of %d table(s) from the checkpoint's separate slot tables into one "
                         "m-and-v table each", len(taken))
            self.checkpointer.note_fine_tune_ignored(fine_tune, path)
        elif fine_tune:
            path = self.checkpointer.init_from(fine_tune)
            finish_restore(self.model.tables)
        return path

    def _now(self) -> tf.Tensor:
        """The clock of the id statistics, as seconds since STATS_EPOCH; the loop's ``clock`` may be replaced."""
        return tf.constant(self._loop.clock() - STATS_EPOCH, tf.float64)

    def train_batch(self, features, labels, sample_weight=None) -> Dict[str, np.ndarray]:
        """Scores then trains one parsed batch; returns each task's pre-update predictions, by task name.

        ``labels``: {label name: [B]} with each label the model's tasks learn from, or the [B] of the first.
        ``sample_weight``: the batch's [B] weights when data_config.sample_weight names a field (required
        then), else None.
        """
        if not isinstance(labels, dict):
            labels = {self._label_names[0]: labels}
        # the traced step's signature names sample_weight even without weights (None then): pass it always
        weights = (None if not self.specs.sample_weight else np.asarray(sample_weight, np.float32),)
        if self.model.scores_differ_in_training:
            logits = self._run(self._score_step, features)
            with self._writing:
                self._run(self._train_step, features, labels, self._now(), *weights)
        else:
            with self._writing:
                logits = self._run(self._train_step, features, labels, self._now(), *weights)
        return {task.name: task.predictions(logits[task.name]) for task in self.model.tasks}

    def train_vectors(self, vectors) -> Dict[str, np.ndarray]:
        """``train_batch`` of a batch parsed into arrays (``vector_csv.VectorBatch``): they go into the step
        whole and are split into features, labels (by name) and sample weights inside it."""
        ragged = tuple((r.flat_values.dtype, name) for name, r in zip(vectors.ragged_names, vectors.ragged))
        names = (vectors.id_names, vectors.dense_names, vectors.label_names, ragged)
        step = self._vector_steps.get(names)
        if step is None:
            step = self._trace_vector_step(*names)
        parts = tuple((r.flat_values, r.row_splits) for r in vectors.ragged)
        with self._writing:
            logits = step(vectors.ids, vectors.dense, vectors.labels, self._now(), parts)
        return {task.name: task.predictions(logits[task.name].numpy()) for task in self.model.tasks}

    def _trace_vector_step(self, id_names: Tuple[str, ...], dense_names: Tuple[str, ...],
                           label_names: Tuple[str, ...], ragged: Tuple[Tuple[np.dtype, str], ...]):
        """(``ragged``: (values dtype, name) of each multi-value feature's ids or weights, fed as values and
        row splits.)"""
        columns = {name: i for i, name in enumerate(label_names)}

        def step(ids, dense, labels, now, parts):
            features = dict(zip(id_names, tf.unstack(ids, len(id_names), axis=1)))
            features.update(zip(dense_names, tf.unstack(dense, len(dense_names), axis=1)))
            features.update((name, tf.RaggedTensor.from_row_splits(values, splits, validate=False))
                            for (_, name), (values, splits) in zip(ragged, parts))
            by_name = {name: labels[:, columns[name]] for name in self._label_names}
            weights = labels[:, columns[SAMPLE_WEIGHT_KEY]] if self.specs.sample_weight else None
            return self._train_step_impl(features, by_name, now, weights)

        signature = [tf.TensorSpec([None, len(id_names)], tf.int64), tf.TensorSpec([None, len(dense_names)], tf.float32),
                     tf.TensorSpec([None, len(label_names)], tf.float32), tf.TensorSpec([], tf.float64),
                     tuple((tf.TensorSpec([None], tf.as_dtype(dtype)), tf.TensorSpec([None], tf.int64))
                           for dtype, _ in ragged)]
        concrete = tf.function(step, input_signature=signature, autograph=False).get_concrete_function()
        call = self._vector_steps[(id_names, dense_names, label_names, ragged)] = flat_call(concrete)
        return call

    def train_and_count(self, raw, parsed) -> np.ndarray:
        """Scores and trains a non-empty batch, adds it to the metrics and counts; returns its probabilities."""
        predictions: Dict[str, np.ndarray]
        if parsed.vectors is not None and not self.model.scores_differ_in_training:
            predictions = self.train_vectors(parsed.vectors)
            labels = parsed.vectors.label_columns
        else:
            by_name = parsed.labels_by_name(self.specs.label_names[0])
            labels = {name: np.asarray(by_name[name]) for name in self._label_names}
            predictions = self.train_batch(parsed.features, labels, parsed.sample_weights)
        targets = self.model.tasks.targets(labels)
        for task in self.model.tasks:
            task.update_metrics(targets[task.name], predictions[task.name])
        self.count(parsed.size)
        return predictions[self.task.name]

    def task_figures(self) -> TaskFigures:
        """Every task's window figures by task name, the primary first."""
        return {task.name: task.metrics.figures() for task in self.model.tasks}

    def count(self, samples: int) -> None:
        """One more step (a batch, even an empty one) of ``samples`` samples."""
        self.step += 1
        self._samples += samples

    def samples_trained(self) -> int:
        """Samples trained since the model began (restored with the checkpoint)."""
        return self._samples

    def samples_at_start(self) -> int:
        """(Asked as a run begins: the samples trained so far.)"""
        return self._samples

    # --- input and status -------------------------------------------------------------
    def make_source(self) -> BatchSource:
        """The configured input, from the restored checkpoint's positions (they win over the config's)."""
        if not self.checkpointer.manager.latest_checkpoint:
            return build_source(self.config, self.specs)
        return build_source(self.config, self.specs, self.checkpointer.positions,
                            positions_topic=self.checkpointer.positions_topic,
                            positions_topic_id=self.checkpointer.positions_topic_id)

    def status_dir(self) -> str:
        return fileio.join(self.checkpointer.local_dir, "train")

    def refresh(self) -> None:
        """(Every figure is this process's own.)"""

    def status_lag(self, lag: Optional[int]) -> Optional[int]:
        return lag

    # --- checkpoints --------------------------------------------------------------------
    @property
    def last_saved_step(self) -> int:
        return self.checkpointer.last_saved_step

    def save(self, positions: Dict[int, int], topic: str, topic_id: str = "") -> Tuple[str, Dict[int, int]]:
        """Checkpoints the model with the positions after the last trained batch."""
        self.checkpointer.step.assign(self.step)
        self.checkpointer.samples.assign(self.samples_trained())
        path = self.checkpointer.save(positions, topic, topic_id)
        log.info("saved checkpoint %s", path)
        return path, positions

    def before_final_checkpoint(self, stop_reason: str) -> Optional[Dict[int, int]]:
        return None

    # --- the tables ------------------------------------------------------------------
    def table_sizes(self) -> Dict[str, int]:
        return self.model.tables.sizes()

    def table_rows(self) -> TableRows:
        """The tables, for publishing and base/delta saves (thread-safe reads); one reader for both, so its
        lookup over every table is traced once."""
        if self._table_rows is None:
            self._table_rows = EagerTableRows(self.model.tables, self._writing)
        return self._table_rows

    def table_ops(self) -> TableOps:
        return EagerTableOps()

    def bounded_sizes(self, tables: Sequence[str]) -> Dict[str, Tuple[int, int]]:
        """One traced call for every table's two sizes: 52 eager size() calls (26 tables and their statistics)
        took ~14 ms, this ~0.6 ms."""
        key = tuple(tables)
        step = self._sizes_steps.get(key)
        if step is None:
            embeddings, statistics = self.model.tables.embeddings, self.model.tables.statistics
            step = self._sizes_steps[key] = tf.function(
                lambda: tf.stack([tf.stack([embeddings[t].params.size(), statistics[t].size()]) for t in key]),
                autograph=False).get_concrete_function()
        sizes = step().numpy() if key else np.zeros((0, 2), np.int64)
        return {table: (int(rows), int(stats)) for table, (rows, stats) in zip(key, sizes)}

    def read_variables(self, variables: Dict) -> Dict:
        return {key: var.numpy() for key, var in variables.items()}

    def read_step(self) -> int:
        return self.step  # (nothing else steps this process's variables)
