"""Builds the optimizer named in train_config, wrapped for TFRA's dynamic tables.

The tf_keras *legacy* optimizers are used: TFRA's DynamicEmbeddingOptimizer
supports them best and their sparse step is faster on CPU.
"""
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()
from tensorflow_recommenders_addons import dynamic_embedding as de  # pylint: disable=g-import-not-at-top


def build_optimizer(config: pipeline_pb2.OptimizerConfig, accumulate: bool = False):
    """The configured optimizer; ``accumulate``: its table slots add deltas (TFRA's bp_v2), for concurrent trainers."""
    which = config.WhichOneof("optimizer") or "adam_optimizer"
    o = getattr(config, which)
    if which == "adam_optimizer":
        opt = tf.keras.optimizers.legacy.Adam(o.learning_rate, beta_1=o.beta1, beta_2=o.beta2, epsilon=o.epsilon)
    elif which == "adagrad_optimizer":
        opt = tf.keras.optimizers.legacy.Adagrad(o.learning_rate, initial_accumulator_value=o.initial_accumulator_value)
    elif which == "sgd_optimizer":
        opt = tf.keras.optimizers.legacy.SGD(o.learning_rate, momentum=o.momentum)
    else:
        opt = tf.keras.optimizers.legacy.Ftrl(o.learning_rate, learning_rate_power=o.learning_rate_power,
                                       initial_accumulator_value=o.initial_accumulator_value,
                                       l1_regularization_strength=o.l1_regularization_strength,
                                       l2_regularization_strength=o.l2_regularization_strength)
    return de.DynamicEmbeddingOptimizer(opt, bp_v2=accumulate)
