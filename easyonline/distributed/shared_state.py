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
- the prequential metrics: score histograms per label (as Paddle's global
  AUC), logloss and label sums, summed over every trainer's batches.
"""
import collections
import dataclasses
from typing import Deque, Dict, Optional, Sequence

import numpy as np

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.metrics import auc_from_histograms

tf = ensure_legacy_keras()

MAX_PARTITIONS = 4096
BUCKETS = 10000
_EPS = 1e-7


class ClusterState:
    """The shared variables; build inside the trainer's graph and replica device setter."""

    def __init__(self, num_trainers: int):
        v1 = tf.compat.v1
        self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.samples = tf.Variable(0, dtype=tf.int64, trainable=False, name="samples_trained")
        self.positions = tf.Variable(tf.fill([MAX_PARTITIONS], tf.constant(-1, tf.int64)), trainable=False,
                                     name="partition_positions")
        self.ready = tf.Variable(0, dtype=tf.int32, trainable=False, name="cluster_ready")
        self.started = tf.Variable(tf.zeros([num_trainers], tf.int32), trainable=False, name="trainers_started")
        self.finished = tf.Variable(tf.zeros([num_trainers], tf.int32), trainable=False, name="trainers_finished")
        self.lags = tf.Variable(tf.zeros([num_trainers], tf.int64), trainable=False, name="trainer_lags")
        self.hist_pos = tf.Variable(tf.zeros([BUCKETS], tf.float64), trainable=False, name="auc_positives")
        self.hist_neg = tf.Variable(tf.zeros([BUCKETS], tf.float64), trainable=False, name="auc_negatives")
        self.logloss_sum = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="logloss_sum")
        self.label_sum = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="label_sum")
        # feeds of the per-step updates and of the chief's writes
        self.partitions_in = v1.placeholder(tf.int64, [None], name="step_partitions")
        self.offsets_in = v1.placeholder(tf.int64, [None], name="step_offsets")
        self.lag_in = v1.placeholder(tf.int64, [], name="step_lag")
        self.trainer_in = v1.placeholder(tf.int32, [], name="trainer_index")
        self.all_positions_in = v1.placeholder(tf.int64, [MAX_PARTITIONS], name="all_positions")
        self.set_positions = self.positions.assign(self.all_positions_in)
        self.set_ready = self.ready.assign(1)
        one = tf.IndexedSlices(tf.ones([1], tf.int32), tf.reshape(self.trainer_in, [1]))
        self.mark_started = self.started.scatter_update(one)
        self.mark_finished = self.finished.scatter_update(one)
        self.reads = {"step": self.global_step, "samples": self.samples, "positions": self.positions,
                      "ready": self.ready, "started": self.started, "finished": self.finished, "lags": self.lags}
        self.metric_reads = {"pos": self.hist_pos, "neg": self.hist_neg, "logloss": self.logloss_sum,
                             "labels": self.label_sum, "samples": self.samples}

    def step_updates(self, labels: tf.Tensor, probabilities: tf.Tensor, trainer_index: int,
                     after: Sequence = ()) -> tf.Operation:
        """The updates of one trained batch, run once the ops in ``after`` (its parameter updates) ran.

        Only the writes wait for ``after``: every value they write is computed first, without waiting,
        on whichever task the setter put it (the trainer's, for the count of the fed labels). A value
        computed on the trainer after the ps applied the batch would have to travel back to the ps, and a
        trainer killed in that round trip would leave the positions advanced and the samples not counted.
        """
        count = tf.size(labels, out_type=tf.int64)
        probs = tf.clip_by_value(tf.cast(probabilities, tf.float64), _EPS, 1 - _EPS)
        labels64 = tf.cast(labels, tf.float64)
        bucket = tf.minimum(tf.cast(probs * BUCKETS, tf.int64), BUCKETS - 1)
        logloss = -tf.reduce_sum(labels64 * tf.math.log(probs) + (1 - labels64) * tf.math.log(1 - probs))
        negatives, positives = 1 - labels64, tf.reduce_sum(labels64)
        lag, index, one = tf.reshape(self.lag_in, [1]), tf.constant([trainer_index]), tf.constant(1, tf.int64)
        with tf.control_dependencies(list(after)):
            return tf.group(
                self.positions.scatter_update(tf.IndexedSlices(self.offsets_in, self.partitions_in)),
                self.global_step.assign_add(one), self.samples.assign_add(count),
                self.lags.scatter_update(tf.IndexedSlices(lag, index)),
                self.hist_pos.scatter_add(tf.IndexedSlices(labels64, bucket)),
                self.hist_neg.scatter_add(tf.IndexedSlices(negatives, bucket)),
                self.logloss_sum.assign_add(logloss), self.label_sum.assign_add(positives))


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
    pos: np.ndarray
    neg: np.ndarray
    logloss: float
    labels: float


class ClusterMetrics:
    """The prequential AUC, logloss and CTR of every trainer's batches, over a sliding window.

    Each ``refresh`` reads the cumulative sums from the ps; the window is the
    difference to the newest earlier reading at least ``window_samples``
    before (or to the start). A trainer takes a reading whenever a tenth of
    the window has passed (``after_step``) and at every status line, so the
    window spans the last ``window_samples`` to within a tenth, as the single
    process's exact window does (a coarser window would mix in older, worse
    scores and read lower).
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
        now = _Reading(int(value["samples"]), value["pos"], value["neg"], float(value["logloss"]),
                       float(value["labels"]))
        while len(self._readings) > 1 and now.samples - self._readings[1].samples >= self.window_samples:
            self._readings.popleft()
        base = self._readings[0] if self._readings and now.samples - self._readings[0].samples >= \
            self.window_samples else None
        zero = _Reading(0, np.zeros_like(now.pos), np.zeros_like(now.neg), 0.0, 0.0)
        base = base or zero
        self._window = _Reading(now.samples - base.samples, now.pos - base.pos, now.neg - base.neg,
                                now.logloss - base.logloss, now.labels - base.labels)
        self._readings.append(now)

    @property
    def window_count(self) -> int:
        return self._window.samples if self._window else 0

    def auc(self) -> Optional[float]:
        return auc_from_histograms(self._window.pos, self._window.neg) if self._window else None

    def logloss(self) -> Optional[float]:
        return self._window.logloss / self._window.samples if self._window and self._window.samples else None

    def ctr(self) -> Optional[float]:
        return self._window.labels / self._window.samples if self._window and self._window.samples else None
