"""Builds the optimizer named in train_config, wrapped for TFRA's dynamic tables.

The tf_keras *legacy* optimizers are used: TFRA's DynamicEmbeddingOptimizer
supports them best and their sparse step is faster on CPU.
"""
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.protos import pipeline_pb2
from easyonline.train.table_adam import keep_slots_together

tf = ensure_legacy_keras()
from tensorflow_recommenders_addons import dynamic_embedding as de  # pylint: disable=g-import-not-at-top


class PartOptimizers(tf.Module):
    """One optimizer for the dynamic tables' rows, another for the dense variables: ``apply_gradients`` hands
    each its share. Checkpointed as ``sparse`` and ``dense``."""

    def __init__(self, sparse, dense):
        super().__init__(name="part_optimizers")
        self.sparse = sparse
        self.dense = dense

    @property
    def _use_locking(self) -> bool:
        return self.dense._use_locking  # pylint: disable=protected-access

    @_use_locking.setter
    def _use_locking(self, value: bool) -> None:
        self.sparse._use_locking = self.dense._use_locking = value  # pylint: disable=protected-access

    def apply_gradients(self, grads_and_vars, **kwargs):
        parts: dict = {id(self.sparse): [], id(self.dense): []}
        for gradient, variable in grads_and_vars:
            owner = self.sparse if isinstance(variable, de.TrainableWrapper) else self.dense
            parts[id(owner)].append((gradient, variable))
        applied = [optimizer.apply_gradients(parts[id(optimizer)], **kwargs)
                   for optimizer in (self.sparse, self.dense) if parts[id(optimizer)]]
        return tf.group(applied)


def build_train_optimizer(train: pipeline_pb2.TrainConfig, accumulate: bool = False):
    """``optimizer_config`` for the whole model, or with ``sparse_optimizer_config`` one optimizer per part."""
    dense = build_optimizer(train.optimizer_config, accumulate)
    if not train.HasField("sparse_optimizer_config"):
        return dense
    return PartOptimizers(build_optimizer(train.sparse_optimizer_config, accumulate), dense)


class ExponentialDecayWithFloor(tf.keras.optimizers.schedules.LearningRateSchedule):
    """EasyRec's exponential_decay_learning_rate: ``initial * factor ^ (step / decay_steps)``, at least ``min``."""

    def __init__(self, initial: float, decay_steps: int, factor: float, staircase: bool, minimum: float):
        self.config = {"initial": initial, "decay_steps": decay_steps, "factor": factor, "staircase": staircase,
                       "minimum": minimum}
        self._decay = tf.keras.optimizers.schedules.ExponentialDecay(initial, decay_steps, factor, staircase)

    def __call__(self, step):
        return tf.maximum(self._decay(step), self.config["minimum"])

    def get_config(self):
        return dict(self.config)


def learning_rate(optimizer) -> object:
    """An optimizer message's learning rate: its ``learning_rate``, or the schedule that replaces it."""
    if not optimizer.HasField("learning_rate_schedule"):
        return optimizer.learning_rate
    schedule = optimizer.learning_rate_schedule
    if schedule.WhichOneof("schedule") == "constant_learning_rate":
        return schedule.constant_learning_rate.learning_rate
    decay = schedule.exponential_decay_learning_rate
    return ExponentialDecayWithFloor(decay.initial_learning_rate, decay.decay_steps, decay.decay_factor,
                                     decay.staircase, decay.min_learning_rate)


def build_optimizer(config: pipeline_pb2.OptimizerConfig, accumulate: bool = False):
    """The configured optimizer; ``accumulate``: its table slots add deltas (TFRA's bp_v2), for concurrent trainers."""
    which = config.WhichOneof("optimizer") or "adam_optimizer"
    o = getattr(config, which)
    rate = learning_rate(o)
    if which == "adam_optimizer":
        opt = tf.keras.optimizers.legacy.Adam(rate, beta_1=o.beta1, beta_2=o.beta2, epsilon=o.epsilon)
    elif which == "adagrad_optimizer":
        opt = tf.keras.optimizers.legacy.Adagrad(rate, initial_accumulator_value=o.initial_accumulator_value)
    elif which == "sgd_optimizer":
        opt = tf.keras.optimizers.legacy.SGD(rate, momentum=o.momentum)
    elif which == "rms_prop_optimizer":
        opt = tf.keras.optimizers.legacy.RMSprop(rate, rho=o.decay, momentum=o.momentum_optimizer_value,
                                                 epsilon=o.epsilon)
    elif which == "ftrl_optimizer":
        opt = tf.keras.optimizers.legacy.Ftrl(
            rate, learning_rate_power=o.learning_rate_power, initial_accumulator_value=o.initial_accumulator_value,
            l1_regularization_strength=o.l1_regularization_strength,
            l2_regularization_strength=o.l2_regularization_strength,
            l2_shrinkage_regularization_strength=o.l2_shrinkage_regularization_strength)
    else:  # EasyRec's other names are rewritten by config.easyrec_compat before this
        raise ValueError(f"{which} is read as another optimizer when the config is loaded")
    wrapped = de.DynamicEmbeddingOptimizer(opt, bp_v2=accumulate)
    if which == "adam_optimizer" and not accumulate:
        keep_slots_together(wrapped)  # m and v of a single-process table in one slot table (table_adam.py)
    return wrapped
