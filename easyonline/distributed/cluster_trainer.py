"""The chief of a parameter-server cluster: the OnlineTrainer whose steps run on workers, parameters on ps.

Built on ``tf.distribute.experimental.ParameterServerStrategy`` and its
``ClusterCoordinator``. The chief reads and parses the stream, runs every
callback (checkpoints with positions, publishing, eviction, stop file) and
schedules each step as a function on a worker. Embedding tables are sharded
over all ps tasks by ``id mod num_ps`` (``DynamicTables`` does it under the
strategy's scope); dense variables are spread over the ps as well. Every
batch's scores come back to the chief, so the prequential metrics cover all
samples whichever worker trained them.

One step runs at a time. TFRA's Keras embedding keeps its looked-up rows in
one shadow buffer per table, shared by every worker under this strategy, so
two steps at once would corrupt each other's rows. Extra workers therefore
give fail-over, not throughput. Reading and parsing still run ahead on the
chief's prefetch thread. docs/distributed.md explains this and its numbers.

Failures:
- A worker dies: the coordinator runs the step again on another worker, and
  training goes on. A step that died half-way may have applied part of its
  update, so that batch counts at least once.
- A ps dies: its part of the parameters is gone. The chief stops without a
  checkpoint and raises ClusterFailure (exit code 5). A restart of the
  cluster resumes from the last checkpoint and its Kafka positions.
"""
import logging
import time
import numpy as np

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.errors import ClusterFailure
from easyonline.distributed.cluster_config import ClusterConfig
from easyonline.features.signature import empty_features
from easyonline.protos import pipeline_pb2
from easyonline.train.trainer import OnlineTrainer
from easyonline.utils.net import wait_for_port

tf = ensure_legacy_keras()
log = logging.getLogger(__name__)




def wait_for_tasks(cluster: ClusterConfig, timeout_secs: float = 120.0) -> None:
    """Waits until every ps and worker accepts connections; raises ClusterFailure naming those that do not."""
    deadline = time.time() + timeout_secs
    missing = []
    for role in ("ps", "worker"):
        for i, address in enumerate(cluster.cluster[role]):
            host, port = address.rsplit(":", 1)
            if not wait_for_port(host, int(port), max(deadline - time.time(), 0.5)):
                missing.append(f"{role} {i} at {address}")
    if missing:
        raise ClusterFailure(f"cluster task(s) not reachable after {timeout_secs:.0f}s: {', '.join(missing)}")


class ClusterTrainer(OnlineTrainer):
    """OnlineTrainer as the chief of ``cluster``; same arguments otherwise."""

    def __init__(self, config: pipeline_pb2.PipelineConfig, cluster: ClusterConfig, **kwargs):
        self.cluster = cluster
        wait_for_tasks(cluster)
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(cluster.cluster), task_type="chief", task_id=0, rpc_layer="grpc")
        self.strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
        self.coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(self.strategy)
        self.remote_seconds = 0.0  # time the chief waited for steps on workers
        log.info("chief of %d ps and %d workers: %s", cluster.num_ps, cluster.num_workers, cluster.cluster)
        super().__init__(config, **kwargs)

    def _variable_scope(self):
        return self.strategy.scope()

    def _distribute(self, step_fn):
        return lambda *args: self.strategy.run(step_fn, args=args)

    def _guarded(self, action, *args):
        """Runs ``action``; an error that means the cluster lost a ps becomes ClusterFailure."""
        try:
            return action(*args)
        except Exception as e:  # pylint: disable=broad-except
            if not _is_cluster_failure(e):
                raise
            self.can_checkpoint = False
            first = str(e).strip().split("\n")[0][:300]
            raise ClusterFailure(f"lost a parameter server ({type(e).__name__}: {first}); the parameters since "
                                 f"the last checkpoint are gone: restart the cluster to resume from "
                                 f"{self.last_checkpoint or 'the start'}") from None

    def _run(self, step, *args) -> np.ndarray:
        started = time.perf_counter()
        try:
            return np.asarray(self._guarded(lambda: self.coordinator.schedule(step, args=args).fetch()))
        finally:
            self.remote_seconds += time.perf_counter() - started

    def run(self):
        self.remote_seconds = 0.0  # the split covers this run, not building the variables
        summary = super().run()
        other = max(summary.seconds - self.remote_seconds - self.input_wait_seconds, 0.0)
        log.info("time split: steps on workers/ps %.1fs (%.0f%%), chief waiting for input %.1fs (%.0f%%), "
                 "chief other work %.1fs (%.0f%%)", self.remote_seconds,
                 100 * self.remote_seconds / max(summary.seconds, 1e-9), self.input_wait_seconds,
                 100 * self.input_wait_seconds / max(summary.seconds, 1e-9), other,
                 100 * other / max(summary.seconds, 1e-9))
        return summary

    def save_checkpoint(self) -> str:
        return self._guarded(super().save_checkpoint)

    def table_sizes(self):
        return self._guarded(super().table_sizes)

    def _build_variables(self) -> None:
        # Tracing the scheduled step creates the model's variables and the optimizer's slots on the ps.
        self._run(self._train_step, empty_features(self.specs), tf.zeros([0], tf.float32), self._now())
        self.model.tables.release_names()


def _is_cluster_failure(error: Exception) -> bool:
    from tensorflow.python.distribute.coordinator import cluster_coordinator  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
    if cluster_coordinator._is_ps_failure(error):  # pylint: disable=protected-access
        return True
    return isinstance(error, (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError,
                              cluster_coordinator.ClosureAbortedError))
