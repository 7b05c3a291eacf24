"""Drops the start-up lines TensorFlow and TFRA print that mean nothing to an operator, and only those.

Every command used to start with ``E ... Unable to register cuDNN factory``
(TensorFlow's CUDA plugins registering twice, on a machine that may not even
have a GPU), TFRA's ``GraphKeys has already been deprecated`` and two
``An exception occurred when import horovod.tensorflow: No module named
'horovod'`` warnings, and TFRA's `` _SingleDeviceSaver removed after tf
version 2.15`` print on stdout. A line marked E or WARNING must mean
something, so each of these is dropped where it is made, by its exact text:

- TensorFlow's C++ log lines at import go to file descriptor 2, so while
  ``tensorflow`` is first imported that descriptor is a pipe whose lines are
  passed on to the real stderr, except the lines of ``NOISE_LINES``;
- TFRA's warnings go through the ``tensorflow`` Python logger: a filter
  drops ``NOISE_RECORDS`` (the horovod one only when horovod is not
  installed at all; a broken horovod still says so);
- TFRA's print is caught while ``tensorflow_recommenders_addons`` is first
  imported; anything else it prints is passed on.

The C++ logs below ERROR stay off (``TF_CPP_MIN_LOG_LEVEL=2`` unless the
user set it), as before; TensorFlow's and TFRA's other errors and warnings
pass. ``EASYONLINE_LIBRARY_LOGS=1`` turns all of this off (and leaves
``TF_CPP_MIN_LOG_LEVEL`` unset): every library line is printed again.

The first imports are caught by an import hook (``install``, called when the
``easyonline`` package is imported), so it does not matter which module
imports TensorFlow first (``tensorflow_serving`` does, in serving). The same
hook keeps Keras 3 out of TFRA's first import (``bootstrap.keras3_left_out``),
with or without ``EASYONLINE_LIBRARY_LOGS``.
"""
import contextlib
import importlib.abc
import importlib.util
import io
import logging
import os
import re
import sys
import threading
from typing import Iterator, Optional

from easyonline.core.bootstrap import keras3_left_out

LIBRARY_LOGS_ENV = "EASYONLINE_LIBRARY_LOGS"

# C++ lines printed while TensorFlow loads (xla's stream executor registers its CUDA plugins twice).
NOISE_LINES = re.compile(r"Unable to register cu(?:FFT|DNN|BLAS) factory: Attempting to register factory for "
                         r"plugin cu(?:FFT|DNN|BLAS) when one has already been registered")
# Messages (format strings' starts) of the "tensorflow" Python logger, logged by TFRA at import.
NOISE_RECORDS = ("dynamic_embedding.GraphKeys has already been deprecated",)
_HOROVOD = "An exception occurred when import horovod.tensorflow: No module named 'horovod'"
# TFRA's print at import (tf_save_restore_patch.py), on stdout.
NOISE_PRINTS = ("_SingleDeviceSaver removed after tf version 2.15",)


def library_logs_wanted() -> bool:
    """True when the user asked for every library line (``EASYONLINE_LIBRARY_LOGS=1``)."""
    return os.environ.get(LIBRARY_LOGS_ENV, "") not in ("", "0")


class NoiseFilter(logging.Filter):
    """Drops the known meaningless records of the ``tensorflow`` logger; passes every other one."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if message.startswith(NOISE_RECORDS):
            return False
        return not (message.startswith(_HOROVOD[:50]) and record.getMessage() == _HOROVOD)


@contextlib.contextmanager
def filtered_stderr_fd() -> Iterator[None]:
    """While inside, lines written to file descriptor 2 (C++ logs included) go through a pipe to the real
    stderr, live, except those matching ``NOISE_LINES``. Does nothing when fd 2 cannot be duplicated."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def forward() -> None:
        with os.fdopen(read_end, "rb") as pipe:
            for line in pipe:
                if not NOISE_LINES.search(line.decode(errors="replace")):
                    while line:  # a large write may be partial
                        line = line[os.write(saved, line):]

    thread = threading.Thread(target=forward, name="quiet-stderr", daemon=True)
    thread.start()
    try:
        yield
    finally:
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(saved, 2)  # closes the pipe's last write end: the forwarder reads to its end and stops
        thread.join(10)
        os.close(saved)


@contextlib.contextmanager
def filtered_stdout() -> Iterator[None]:
    """While inside, Python prints to sys.stdout are held and passed on at the end, minus ``NOISE_PRINTS``."""
    held = io.StringIO()
    try:
        with contextlib.redirect_stdout(held):
            yield
    finally:
        kept = [line for line in held.getvalue().splitlines(keepends=True) if line.strip() not in NOISE_PRINTS]
        if kept:
            sys.stdout.write("".join(kept))


class _QuietLoader(importlib.abc.Loader):
    """Runs the wrapped loader's module in the given quiet context; everything else is the wrapped loader's."""

    def __init__(self, loader, quiet):
        self._loader, self._quiet = loader, quiet

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = self._loader  # tracebacks and inspect read sources through the real loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        with self._quiet():
            self._loader.exec_module(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


@contextlib.contextmanager
def _tfra_first_import(quiet: bool) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        stack.enter_context(keras3_left_out())
        if quiet:
            stack.enter_context(filtered_stdout())
        yield


class _QuietFirstImport(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow`` and ``tensorflow_recommenders_addons`` as usual, and loads them quietly (``quiet``)
    and TFRA without Keras 3."""

    def __init__(self, quiet: bool):
        self._contexts = {"tensorflow_recommenders_addons": lambda: _tfra_first_import(quiet)}
        if quiet:
            self._contexts["tensorflow"] = filtered_stderr_fd

    def find_spec(self, fullname, path, target=None):
        if fullname not in self._contexts:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _QuietLoader(spec.loader, self._contexts[fullname])
                return spec
        return None


_installed: Optional[_QuietFirstImport] = None


def install() -> None:
    """Sets up the quiet start (once per process): TF_CPP_MIN_LOG_LEVEL, the logger filter, the import hook.
    With ``EASYONLINE_LIBRARY_LOGS=1``, only the hook that keeps Keras 3 out of TFRA's import."""
    global _installed
    if _installed is not None:
        return
    quiet = not library_logs_wanted()
    if quiet:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # a value the user set wins
        tf_logger = logging.getLogger("tensorflow")
        if not any(isinstance(f, NoiseFilter) for f in tf_logger.filters):
            tf_logger.addFilter(NoiseFilter())
    _installed = _QuietFirstImport(quiet)
    sys.meta_path.insert(0, _installed)  # asked only for modules not imported yet
