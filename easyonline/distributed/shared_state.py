"""What the trainers of a cluster share on the ps, beside the model: positions, counters, flags, metrics.

Every trainer updates these in the same ``session.run`` as its training
step, after the step's updates are applied (control dependencies), so a
partition's position never runs ahead of the parameters it produced. The
chief reads them to checkpoint, to report the whole cluster and to know when
an offline run is over.

- ``positions``: the next offset of every partition (-1: not read yet), one
  slot per partition up to MAX_PARTITIONS.
- ``global_step``, ``samples``: steps and samples of all trainers.
- ``ready``: 1 once the chief has initialised or restored the parameters;
  other trainers wait for it.
- ``started``: per trainer, 1 once it joined and built its input; a
  starting cluster's trainers wait for each other (bounded) so that they
  begin stepping together, as Paddle's ``barrier_worker``.
- ``finished``: per trainer, 1 once it caught up in an offline run.
- ``lags``: per trainer, the messages it had not read at its last batch.
- ``pause``, ``paused``, ``stepping``: the chief's request that the other
  trainers hold still while it saves a checkpoint (a generation, 0: none),
  each trainer's acknowledgement, and whether it is inside a step
  (``save_pause.py``).
- the prequential metrics of every task, summed over every trainer's
  batches: a binary task's score histograms per label (as Paddle's global
  AUC), logloss and label sums; a regression task's squared error and label
  sums. The primary task's variables keep their names of a single-task model.
"""
import collections
import dataclasses
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.metrics import auc_from_histograms

tf = ensure_legacy_keras()

MAX_PARTITIONS = 4096
BUCKETS = 10000
_EPS = 1e-7


class ClusterState:
    """The shared variables; build inside the trainer's graph and replica device setter."""

    def __init__(self, num_trainers: int, tasks: Sequence[Tuple[str, str]] = (("ctr", "binary"),)):
        """``tasks``: (name, kind) of the model's tasks, the primary first: each has its shared sums."""
        v1 = tf.compat.v1
        self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.samples = tf.Variable(0, dtype=tf.int64, trainable=False, name="samples_trained")
        self.positions = tf.Variable(tf.fill([MAX_PARTITIONS], tf.constant(-1, tf.int64)), trainable=False,
                                     name="partition_positions")
        self.ready = tf.Variable(0, dtype=tf.int32, trainable=False, name="cluster_ready")
        self.started = tf.Variable(tf.zeros([num_trainers], tf.int32), trainable=False, name="trainers_started")
        self.finished = tf.Variable(tf.zeros([num_trainers], tf.int32), trainable=False, name="trainers_finished")
        self.lags = tf.Variable(tf.zeros([num_trainers], tf.int64), trainable=False, name="trainer_lags")
        self.pause = tf.Variable(0, dtype=tf.int64, trainable=False, name="save_pause")
        self.paused = tf.Variable(tf.zeros([num_trainers], tf.int64), trainable=False, name="trainers_paused")
        self.stepping = tf.Variable(tf.zeros([num_trainers], tf.int32), trainable=False, name="trainers_stepping")
        self.tasks = tuple(tasks)
        # {task name: {sum name: variable}}: "pos", "neg", "logloss", "labels" (binary); "squared", "labels"
        self.task_sums: Dict[str, Dict[str, tf.Variable]] = {
            name: _task_variables(kind, "" if i == 0 else f"_{name}") for i, (name, kind) in enumerate(self.tasks)}
        # feeds of the per-step updates and of the chief's writes
        self.partitions_in = v1.placeholder(tf.int64, [None], name="step_partitions")
        self.offsets_in = v1.placeholder(tf.int64, [None], name="step_offsets")
        self.lag_in = v1.placeholder(tf.int64, [], name="step_lag")
        self.trainer_in = v1.placeholder(tf.int32, [], name="trainer_index")
        self.all_positions_in = v1.placeholder(tf.int64, [MAX_PARTITIONS], name="all_positions")
        self.set_positions = self.positions.assign(self.all_positions_in)
        self.set_ready = self.ready.assign(1)
        self.generation_in = v1.placeholder(tf.int64, [], name="pause_generation")
        self.set_pause = self.pause.assign(self.generation_in)
        trainer = tf.reshape(self.trainer_in, [1])
        self.ack_pause = tf.group(self.paused.scatter_update(tf.IndexedSlices(tf.reshape(self.generation_in, [1]),
                                                                              trainer)),
                                  self.stepping.scatter_update(tf.IndexedSlices(tf.zeros([1], tf.int32), trainer)))
        self.pause_reads = {"paused": self.paused, "stepping": self.stepping, "started": self.started,
                            "finished": self.finished}
        one = tf.IndexedSlices(tf.ones([1], tf.int32), tf.reshape(self.trainer_in, [1]))
        self.mark_started = self.started.scatter_update(one)
        self.mark_finished = self.finished.scatter_update(one)
        self.reads = {"step": self.global_step, "samples": self.samples, "positions": self.positions,
                      "ready": self.ready, "started": self.started, "finished": self.finished, "lags": self.lags}
        self.metric_reads = {"samples": self.samples, "tasks": self.task_sums}

    def begin_step(self, trainer_index: int) -> tf.Tensor:
        """Marks ``trainer_index`` inside a step, then reads ``pause`` (in that order: save_pause.py)."""
        mark = self.stepping.scatter_update(tf.IndexedSlices(tf.ones([1], tf.int32), tf.constant([trainer_index])))
        with tf.control_dependencies([mark]):
            return self.pause.read_value()

    def step_updates(self, labels: Union[tf.Tensor, Dict[str, tf.Tensor]],
                     predictions: Union[tf.Tensor, Dict[str, tf.Tensor]], trainer_index: int,
                     after: Sequence = ()) -> tf.Operation:
        """The updates of one trained batch, run once the ops in ``after`` (its parameter updates) ran.

        ``labels``, ``predictions``: each task's [B] by task name (a binary task's probabilities), or the
        primary task's alone.

        Only the writes wait for ``after``: every value they write is computed first, without waiting,
        on whichever task the setter put it (the trainer's, for the count of the fed labels). A value
        computed on the trainer after the ps applied the batch would have to travel back to the ps, and a
        trainer killed in that round trip would leave the positions advanced and the samples not counted.
        """
        primary = self.tasks[0][0]
        labels = labels if isinstance(labels, dict) else {primary: labels}
        predictions = predictions if isinstance(predictions, dict) else {primary: predictions}
        count = tf.size(labels[primary], out_type=tf.int64)
        # (variable, value, bucket or None): added once the step's updates ran; the values computed before
        writes: List[Tuple[tf.Variable, Any, Any]] = []
        for name, kind in self.tasks:
            labels64, sums = tf.cast(labels[name], tf.float64), self.task_sums[name]
            if kind == "binary":
                probs = tf.clip_by_value(tf.cast(predictions[name], tf.float64), _EPS, 1 - _EPS)
                bucket = tf.minimum(tf.cast(probs * BUCKETS, tf.int64), BUCKETS - 1)
                logloss = -tf.reduce_sum(labels64 * tf.math.log(probs) + (1 - labels64) * tf.math.log(1 - probs))
                writes += [(sums["pos"], labels64, bucket), (sums["neg"], 1 - labels64, bucket),
                           (sums["logloss"], logloss, None)]
            else:
                writes.append((sums["squared"], tf.reduce_sum(tf.square(tf.cast(predictions[name], tf.float64)
                                                                         - labels64)), None))
            writes.append((sums["labels"], tf.reduce_sum(labels64), None))
        lag, index, one = tf.reshape(self.lag_in, [1]), tf.constant([trainer_index]), tf.constant(1, tf.int64)
        with tf.control_dependencies(list(after)):
            return tf.group(
                self.positions.scatter_update(tf.IndexedSlices(self.offsets_in, self.partitions_in)),
                self.global_step.assign_add(one), self.samples.assign_add(count),
                self.lags.scatter_update(tf.IndexedSlices(lag, index)),
                # out of the step once its updates are written (save_pause.py: a save may begin)
                self.stepping.scatter_update(tf.IndexedSlices(tf.zeros([1], tf.int32), index)),
                *[variable.assign_add(value) if bucket is None else
                  variable.scatter_add(tf.IndexedSlices(value, bucket)) for variable, value, bucket in writes])


def _task_variables(kind: str, suffix: str) -> Dict[str, tf.Variable]:
    """A task's shared sums (``suffix``: "" for the primary task, whose names are a single-task model's)."""
    def variable(name: str, shape=()) -> tf.Variable:
        return tf.Variable(tf.zeros(shape, tf.float64), trainable=False, name=name + suffix)
    if kind == "binary":
        return {"pos": variable("auc_positives", [BUCKETS]), "neg": variable("auc_negatives", [BUCKETS]),
                "logloss": variable("logloss_sum"), "labels": variable("label_sum")}
    return {"squared": variable("squared_error_sum"), "labels": variable("label_sum")}


def positions_array(positions: Dict[int, int]) -> np.ndarray:
    """{partition: offset} as the shared ``positions`` vector (-1 where unknown)."""
    array = np.full([MAX_PARTITIONS], -1, np.int64)
    for partition, offset in positions.items():
        array[int(partition)] = int(offset)
    return array


def positions_dict(array: np.ndarray) -> Dict[int, int]:
    return {int(p): int(o) for p, o in enumerate(array) if o >= 0}


@dataclasses.dataclass
class _Reading:
    samples: int
    sums: Dict[str, Dict[str, np.ndarray]]  # {task: {sum name: cumulative value}}

    def minus(self, other: "_Reading") -> "_Reading":
        return _Reading(self.samples - other.samples,
                        {task: {k: v - other.sums[task][k] for k, v in sums.items()} for task, sums in self.sums.items()})


def _figures(samples: int, sums: Dict[str, np.ndarray]) -> Dict[str, Optional[float]]:
    """A task's figures from its window's sums (tasks/task_figures.py names them)."""
    def mean(total: np.ndarray) -> Optional[float]:
        return float(total) / samples if samples else None
    if "pos" in sums:
        return {"auc": auc_from_histograms(sums["pos"], sums["neg"]), "logloss": mean(sums["logloss"]),
                "ctr": mean(sums["labels"])}
    return {"mse": mean(sums["squared"]), "label_mean": mean(sums["labels"])}


class ClusterMetrics:
    """Every task's prequential figures over every trainer's batches, over a sliding window.

    Each ``refresh`` reads the cumulative sums from the ps; the window is the
    difference to the newest earlier reading at least ``window_samples``
    before (or to the start). A trainer takes a reading whenever a tenth of
    the window has passed (``after_step``) and at every status line, so the
    window spans the last ``window_samples`` to within a tenth, as the single
    process's exact window does (a coarser window would mix in older, worse
    scores and read lower). ``auc``, ``logloss`` and ``ctr`` are the primary
    task's (None when it is a regression).
    """

    def __init__(self, session_run, state: ClusterState, window_samples: int):
        self._run = session_run
        self._state = state
        self.window_samples = window_samples
        self._readings: Deque[_Reading] = collections.deque()
        self._window: Optional[_Reading] = None

    def after_step(self, samples: int) -> None:
        """Takes a reading if a tenth of the window has passed since the last one (``samples``: the cluster's)."""
        if not self._readings or samples - self._readings[-1].samples >= max(self.window_samples // 10, 1):
            self.refresh()

    def refresh(self) -> None:
        value = self._run(self._state.metric_reads)
        now = _Reading(int(value["samples"]), {task: {k: np.asarray(v, np.float64) for k, v in sums.items()}
                                               for task, sums in value["tasks"].items()})
        while len(self._readings) > 1 and now.samples - self._readings[1].samples >= self.window_samples:
            self._readings.popleft()
        base = self._readings[0] if self._readings and now.samples - self._readings[0].samples >= \
            self.window_samples else None
        self._window = now.minus(base) if base is not None else now
        self._readings.append(now)

    @property
    def window_count(self) -> int:
        return self._window.samples if self._window else 0

    def task_figures(self) -> Dict[str, Dict[str, Optional[float]]]:
        """Every task's figures over the window, by task name, the primary first (all None before a reading)."""
        if self._window is None:
            return {name: ({"auc": None, "logloss": None, "ctr": None} if kind == "binary"
                           else {"mse": None, "label_mean": None}) for name, kind in self._state.tasks}
        return {name: _figures(self._window.samples, self._window.sums[name]) for name, _ in self._state.tasks}

    def figures(self) -> Dict[str, Optional[float]]:
        """The primary task's figures."""
        return self.task_figures()[self._state.tasks[0][0]]

    def auc(self) -> Optional[float]:
        return self.figures().get("auc")

    def logloss(self) -> Optional[float]:
        return self.figures().get("logloss")

    def ctr(self) -> Optional[float]:
        return self.figures().get("ctr")
