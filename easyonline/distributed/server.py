"""A ``ps`` or ``worker`` task: a TensorFlow server that the chief drives; it holds no state of its own.

TFRA's ops are imported first so that the server can run them. The process
stops on SIGTERM/SIGINT (the launcher's way), or when killed.
"""
import logging
import signal
import threading

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.distributed.cluster_config import ClusterConfig

log = logging.getLogger(__name__)


def run_server(cluster: ClusterConfig) -> int:
    """Serves until SIGTERM/SIGINT; returns the exit code."""
    tf = ensure_legacy_keras()
    import tensorflow_recommenders_addons  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    tf.distribute.Server(tf.train.ClusterSpec(cluster.cluster), job_name=cluster.task_type,
                         task_index=cluster.task_index, protocol="grpc", start=True)
    log.info("%s %d serving at %s (cluster: %d ps, %d workers)", cluster.task_type, cluster.task_index,
             cluster.address, cluster.num_ps, cluster.num_workers)
    while not stop.wait(1.0):
        pass
    log.info("%s %d stopping", cluster.task_type, cluster.task_index)
    return 0
