"""A ``ps`` or ``worker`` task: a TensorFlow server that the chief drives; it holds no state of its own.

TFRA's ops are imported first so that the server can run them. The process
stops on SIGTERM/SIGINT (the launcher's way), or when killed.
"""
import logging
import signal
import threading
import time

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.distributed.cluster_config import ClusterConfig
from easyonline.protos import pipeline_pb2

log = logging.getLogger(__name__)


def start_server(cluster: ClusterConfig, train: pipeline_pb2.TrainConfig):
    """This task's TensorFlow server. Its thread pools run every op placed on this task, whichever
    trainer's session sent it, so they take train_config's thread counts (TensorFlow's default, one
    spinning thread per core in each pool of each task, wastes the cores that several tasks share)."""
    tf = ensure_legacy_keras()
    import tensorflow_recommenders_addons  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=train.intra_op_threads,
                                      inter_op_parallelism_threads=train.inter_op_threads)
    return tf.distribute.Server(tf.train.ClusterSpec({r: t for r, t in cluster.cluster.items() if t}),
                                job_name=cluster.task_type, task_index=cluster.task_index, protocol="grpc",
                                config=config, start=True)


def run_server(cluster: ClusterConfig, train: pipeline_pb2.TrainConfig) -> int:
    """Serves until SIGTERM/SIGINT; returns the exit code."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    start_server(cluster, train)
    log.info("%s %d serving at %s (cluster: %d ps, %d workers)", cluster.task_type, cluster.task_index,
             cluster.address, cluster.num_ps, cluster.num_workers)
    while not stop.wait(1.0):
        pass
    log.info("%s %d stopping after %.1f cpu seconds", cluster.task_type, cluster.task_index, time.process_time())
    return 0
