"""Applies train_config's TensorFlow thread counts, which only work before TensorFlow runs an op."""
import logging

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()
log = logging.getLogger(__name__)


def apply_thread_config(train: pipeline_pb2.TrainConfig) -> bool:
    """Returns False (and logs why) when TensorFlow was already initialised with other settings."""
    want = (train.intra_op_threads, train.inter_op_threads)
    have = (tf.config.threading.get_intra_op_parallelism_threads(),
            tf.config.threading.get_inter_op_parallelism_threads())
    if want == have:
        return True
    try:
        tf.config.threading.set_intra_op_parallelism_threads(train.intra_op_threads)
        tf.config.threading.set_inter_op_parallelism_threads(train.inter_op_threads)
        return True
    except RuntimeError:
        log.warning("TensorFlow is already running with intra/inter-op threads %s; train_config asks for %s "
                    "(set them before any TensorFlow op runs, e.g. build the trainer first)", have, want)
        return False
