"""ClusterMetrics: the cluster's windowed AUC from the shared histograms, on a real (local) TensorFlow session."""
import numpy as np
import pytest

import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.distributed.shared_state import ClusterMetrics, ClusterState

tf = ensure_legacy_keras()


class _SharedState:
    """A ClusterState of one trainer in a local graph and session (no cluster needed for its arithmetic)."""

    def __init__(self):
        v1 = tf.compat.v1
        self.graph = tf.Graph()
        with self.graph.as_default():
            self.state = ClusterState(1)
            self.labels = v1.placeholder(tf.float32, [None])
            self.probs = v1.placeholder(tf.float32, [None])
            self.update = self.state.step_updates(self.labels, self.probs, 0)
            init = v1.global_variables_initializer()
        self.session = v1.Session(graph=self.graph)
        self.session.run(init)

    def run(self, fetches, feed_dict=None):
        return self.session.run(fetches, feed_dict)

    def step(self, labels: np.ndarray, probs: np.ndarray) -> int:
        self.run(self.update, {self.labels: labels, self.probs: probs, self.state.partitions_in: [0],
                               self.state.offsets_in: [1], self.state.lag_in: 0})
        return int(self.run(self.state.samples))


def _batches(rng, count, separable):
    for _ in range(count):
        labels = rng.integers(0, 2, 100).astype(np.float32)
        probs = np.where(labels > 0, 0.8, 0.2) if separable else rng.random(100)
        yield labels, probs.astype(np.float32)


def test_the_window_covers_the_last_window_samples_when_readings_follow_the_steps():
    """Random scores, then perfect ones: the window holds only the perfect ones, to a tenth of the window."""
    rng = np.random.default_rng(0)
    shared = _SharedState()
    stepped = ClusterMetrics(shared.run, shared.state, window_samples=5000)
    sparse = ClusterMetrics(shared.run, shared.state, window_samples=5000)  # read only at the start and the end
    sparse.refresh()
    for labels, probs in [*_batches(rng, 50, separable=False), *_batches(rng, 60, separable=True)]:
        stepped.after_step(shared.step(labels, probs))
    stepped.refresh()
    sparse.refresh()
    assert 5000 <= stepped.window_count <= 5500
    assert stepped.auc() > 0.95  # at most 500 random scores among 5000+
    assert sparse.window_count == 11000 and sparse.auc() < 0.85  # what the coarse window used to report
    assert stepped.ctr() == pytest.approx(0.5, abs=0.05)


def test_every_tasks_shared_sums_give_its_figures_by_hand():
    """A binary task and a regression task on one shared state: AUC/logloss/CTR and MSE from the ps sums."""
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        state = ClusterState(1, [("ctr", "binary"), ("rating", "regression")])
        feeds = {name: (v1.placeholder(tf.float32, [None]), v1.placeholder(tf.float32, [None]))
                 for name in ("ctr", "rating")}
        update = state.step_updates({n: f[0] for n, f in feeds.items()}, {n: f[1] for n, f in feeds.items()}, 0)
        init = v1.global_variables_initializer()
    session = v1.Session(graph=graph)
    session.run(init)
    metrics = ClusterMetrics(session.run, state, window_samples=100)
    assert metrics.task_figures()["rating"] == {"mse": None, "label_mean": None}
    for clicks, probs, ratings, predicted in (((1, 0), (0.9, 0.2), (1.0, 2.0), (1.5, 2.0)),
                                              ((1, 0), (0.4, 0.6), (3.0, 0.0), (2.0, 0.0))):
        session.run(update, {feeds["ctr"][0]: clicks, feeds["ctr"][1]: probs,
                             feeds["rating"][0]: ratings, feeds["rating"][1]: predicted,
                             state.partitions_in: [0], state.offsets_in: [1], state.lag_in: 0})
        metrics.after_step(int(session.run(state.samples)))
    metrics.refresh()
    figures = metrics.task_figures()
    # positives 0.9, 0.4; negatives 0.2, 0.6: 3 of 4 pairs right
    assert figures["ctr"]["auc"] == pytest.approx(0.75) and figures["ctr"]["ctr"] == pytest.approx(0.5)
    assert figures["ctr"]["logloss"] == pytest.approx(-(np.log(0.9) + np.log(0.8) + 2 * np.log(0.4)) / 4, rel=1e-5)
    # squared errors 0.25, 0, 1, 0: MSE 1.25 / 4; labels 1, 2, 3, 0: mean 1.5
    assert figures["rating"]["mse"] == pytest.approx(1.25 / 4) and figures["rating"]["label_mean"] == 1.5
    assert metrics.auc() == figures["ctr"]["auc"] and metrics.figures() == figures["ctr"]
