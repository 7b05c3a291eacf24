"""Loads TensorFlow with Keras 2, the only Keras TFRA trains with.

TFRA's layers subclass ``tf_keras`` (Keras 2), so ``TF_USE_LEGACY_KERAS=1``
must be set before TensorFlow is first imported. Importing the
``easyonline`` package sets it; ``ensure_legacy_keras`` imports TensorFlow
and fails fast, with a message that says what to do, if ``tf.keras`` is
Keras 3 anyway. Every module that uses TensorFlow gets it from here.

TFRA's import also tries ``import keras`` (Keras 3, installed as a
dependency of TensorFlow 2.16) to patch its initializers and its saving for
Keras 3 users. easyonline never uses Keras 3, and loading it costs each
process that imports TFRA (every trainer, ps, export, serve) about half a
second of CPU and two seconds of start-up on a busy machine; ``keras3_left_out``
makes that import fail (TFRA catches it, as where Keras 3 is not installed)
unless Keras 3 is already loaded.
"""
import contextlib
import os
import sys
from typing import Iterator

from easyonline.core.errors import KerasVersionError


def ensure_legacy_keras():
    """Imports TensorFlow and returns it, checking that tf.keras is Keras 2."""
    if os.environ.get("TF_USE_LEGACY_KERAS") != "1":
        raise KerasVersionError(
            "easyonline needs TF_USE_LEGACY_KERAS=1 (TFRA works with tf_keras, "
            f"not Keras 3); it is set to {os.environ.get('TF_USE_LEGACY_KERAS')!r}. "
            "Unset it or set it to 1 before starting Python.")
    import tensorflow as tf  # pylint: disable=g-import-not-at-top  why: loading TensorFlow is this function's job
    if not tf.keras.layers.Layer.__module__.startswith("tf_keras"):
        version = getattr(tf.keras, "__version__", "3")
        raise KerasVersionError(
            f"tf.keras is Keras {version}, but easyonline (through TFRA) "
            "needs Keras 2 from the tf-keras package. TensorFlow was imported "
            "before easyonline with TF_USE_LEGACY_KERAS unset: import easyonline "
            "first, or export TF_USE_LEGACY_KERAS=1, and install tf-keras~=2.16.")
    return tf


@contextlib.contextmanager
def keras3_left_out() -> Iterator[None]:
    """While inside, ``import keras`` raises ImportError, unless Keras 3 is already loaded (then it is left as it
    is); afterwards it imports as usual. For TFRA's first import (``quiet_libraries``'s import hook)."""
    if "keras" in sys.modules:
        yield
        return
    sys.modules["keras"] = None  # type: ignore[assignment]  # None in sys.modules: the import raises
    try:
        yield
    finally:
        if sys.modules.get("keras", 0) is None:
            del sys.modules["keras"]
