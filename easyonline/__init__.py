"""easyonline: online training of recommendation models from Kafka.

TFRA's layers subclass ``tf_keras`` (Keras 2), so ``TF_USE_LEGACY_KERAS=1``
must be set before TensorFlow is first imported. Importing this package does
that, and fails fast if TensorFlow was already loaded with Keras 3.
"""
import os as _os
import sys as _sys

__version__ = "0.1.0"

_os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


class KerasVersionError(ImportError):
    """Raised when ``tf.keras`` is Keras 3, which TFRA cannot train with."""


def ensure_legacy_keras():
    """Imports TensorFlow and returns it, checking that tf.keras is Keras 2."""
    if _os.environ.get("TF_USE_LEGACY_KERAS") != "1":
        raise KerasVersionError(
            "easyonline needs TF_USE_LEGACY_KERAS=1 (TFRA works with tf_keras, "
            f"not Keras 3); it is set to {_os.environ.get('TF_USE_LEGACY_KERAS')!r}. "
            "Unset it or set it to 1 before starting Python.")
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    if not tf.keras.layers.Layer.__module__.startswith("tf_keras"):
        version = getattr(tf.keras, "__version__", "3")
        raise KerasVersionError(
            f"tf.keras is Keras {version}, but easyonline (through TFRA) "
            "needs Keras 2 from the tf-keras package. TensorFlow was imported "
            "before easyonline with TF_USE_LEGACY_KERAS unset: import easyonline "
            "first, or export TF_USE_LEGACY_KERAS=1, and install tf-keras~=2.16.")
    return tf


def online_train(*args, **kwargs):
    """See easyonline.train.online_train.online_train (imported lazily: it loads TensorFlow)."""
    from easyonline.train.online_train import online_train as _online_train  # pylint: disable=g-import-not-at-top
    return _online_train(*args, **kwargs)


def shrink(trainer):
    """Evicts now per the tables' eviction configs (Paddle's fleet.shrink()); returns {table: evicted keys}."""
    return trainer.shrink()


def save_model(trainer, mode: str = "checkpoint"):
    """Saves now, as Paddle's save modes: "checkpoint" (everything to continue training), "base" (every
    parameter serving needs, no optimizer slots) or "delta" (dense + rows changed since the last base or
    delta). Base and delta go to train_config.inference_save_config's save_dir; returns the path."""
    if mode == "checkpoint":
        return trainer.save_checkpoint()
    if mode not in ("base", "delta"):
        raise ValueError(f"save_model: mode must be checkpoint, base or delta, got {mode!r}")
    from easyonline.publish.base_delta import InferenceSaves  # pylint: disable=g-import-not-at-top
    saves = next((c for c in trainer.callbacks if isinstance(c, InferenceSaves)), None)
    if saves is None:
        from easyonline.protos import pipeline_pb2  # pylint: disable=g-import-not-at-top
        saves = InferenceSaves(pipeline_pb2.InferenceSaveConfig(base_save_at_hour=-1, delta_save_secs=0),
                               trainer.config.model_dir)
        trainer.callbacks.append(saves)  # from now on it records changed keys for the next delta
    return (saves.save_base(trainer) if mode == "base" else saves.save_delta(trainer)).path


if "tensorflow" in _sys.modules:
    ensure_legacy_keras()
