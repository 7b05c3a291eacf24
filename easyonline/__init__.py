"""easyonline: online training of recommendation models from Kafka.

TFRA's layers subclass ``tf_keras`` (Keras 2), so ``TF_USE_LEGACY_KERAS=1``
must be set before TensorFlow is first imported: importing this package sets
it (``core/bootstrap.py`` checks it), and fails fast if TensorFlow was
already loaded with Keras 3. It also drops the start-up lines of TensorFlow
and TFRA that mean nothing to an operator (``core/quiet_libraries.py``).

The Python API (``online_train``, ``save_model``, ``shrink``) lives in
``easyonline.jobs``; it is reachable here as ``easyonline.online_train`` and
so on, loaded on first use so that importing any easyonline module (the
Kafka reader process, ``serve --help``) does not load TensorFlow.
"""
import os as _os
import sys as _sys

__version__ = "0.1.0"

_os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from easyonline.core import quiet_libraries as _quiet  # noqa: E402

_quiet.install()  # TensorFlow's and TFRA's meaningless start-up lines are dropped (EASYONLINE_LIBRARY_LOGS=1: kept)

_API = {"online_train": "easyonline.jobs.online_train", "save_model": "easyonline.jobs.model_ops",
        "shrink": "easyonline.jobs.model_ops"}


def __getattr__(name: str):
    if name in _API:
        import importlib  # pylint: disable=g-import-not-at-top
        return getattr(importlib.import_module(_API[name]), name)  # why: the API loads TensorFlow
    raise AttributeError(f"module 'easyonline' has no attribute {name!r}")


if "tensorflow" in _sys.modules:
    from easyonline.core.bootstrap import ensure_legacy_keras as _check  # noqa: E402
    _check()
