"""A single process's checkpoint written by one traced call instead of op by op.

Eagerly, TensorFlow's saver runs each variable read and each table export as
an op of its own (DeepFM of samples/online.config: ~60 reads and 52 exports
of tables and slot tables) and walks the object graph in Python at every
save: 0.11-0.16 s on the project's 2-core machine with small tables. The
training loop trains and publishes nothing meanwhile, so a sample that
arrives then waits for the save (serving freshness, docs/benchmarks.md).
Traced, a save is one function call running the same ops, writing the same
files (~0.04 s).

A traced save captures which objects it saves. It is traced again whenever
that set changes (an optimizer makes its slots at its first step, a restore
adopts slot tables), found by comparing the objects the checkpoint reaches
and every optimizer's variables before each save (~5 ms), and when a table
that keeps Adam's state in its rows grows past the size from which its
entries are written piece by piece (``rows_with_state.save_plan``).
"""
import logging
import os
from typing import Any, Callable, List, Optional, Tuple

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.embedding.rows_with_state import save_plan

tf = ensure_legacy_keras()
from tensorflow.python.checkpoint import checkpoint_options, trackable_view  # noqa: E402  pylint: disable=g-import-not-at-top

log = logging.getLogger(__name__)


_SLOTS = object()  # in ``objects_saved``: an optimizer's variables follow


def objects_saved(checkpoint: Any) -> List[Any]:
    """What a save of ``checkpoint`` writes: every object it reaches, then each optimizer's variables (slot
    variables are not among the objects reached; they hang off their optimizer)."""
    objects = trackable_view.TrackableView(checkpoint).descendants()
    out = list(objects)
    for o in objects:
        if hasattr(o, "get_slot_names") and callable(getattr(o, "variables", None)):
            out.append(_SLOTS)
            out.extend(o.variables())
    return out


def _same_objects(a: List[Any], b: List[Any]) -> bool:
    """The same objects in the same order (by identity: an object made where a freed one was is another)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


class TracedSaves:
    """Makes ``checkpoint``'s saves run as one traced call (see the module's docstring).

    ``install`` replaces the save of the checkpoint's own saver, which ``tf.train.CheckpointManager.save``
    reaches through ``Checkpoint._write``: the manager keeps numbering, recording and deleting checkpoints as
    before. Only eager saves without options are traced; any other save goes to TensorFlow's own.
    """

    def __init__(self, checkpoint: Any):
        self._checkpoint = checkpoint
        self._eager_save: Optional[Callable] = None
        self._traced: Optional[Any] = None
        self._traced_for: List[Any] = []  # (held: their ids cannot be reused while compared)
        self._traced_plan: Tuple[bool, ...] = ()  # how its tables' entries are made (embedding/rows_with_state.py)
        self.traces = 0

    def install(self) -> None:
        """Routes the checkpoint's saves through ``save``; where TensorFlow's checkpoint has no saver to route (a
        TensorFlow whose internals differ), says so and leaves the saves eager."""
        saver = getattr(self._checkpoint, "_saver", None)
        if saver is None or not callable(getattr(saver, "save", None)):
            log.warning("checkpoints are saved op by op: this TensorFlow's tf.train.Checkpoint has no _saver")
            return
        self._eager_save = saver.save
        saver.save = self.save  # (an instance attribute: the class's method stays TensorFlow's)

    def save(self, file_prefix, checkpoint_number=None, session=None, options=None):
        """TensorFlow's ``TrackableSaver.save``, traced when eager and plain (the only case this trainer makes)."""
        assert self._eager_save is not None
        plain = checkpoint_number is None and session is None and not _io_options(options)
        if not plain or not tf.executing_eagerly() or tf.is_tensor(file_prefix):
            return self._eager_save(file_prefix, checkpoint_number=checkpoint_number, session=session,
                                    options=options)
        folder = os.path.dirname(file_prefix)
        if folder:  # (TensorFlow's eager save makes the folder; a traced one does not)
            tf.io.gfile.makedirs(folder)
        saved = objects_saved(self._checkpoint)
        plan = save_plan(saved)
        if self._traced is None or not _same_objects(saved, self._traced_for) or plan != self._traced_plan:
            self._traced = tf.function(self._write_traced)
            self._traced_for, self._traced_plan = saved, plan
            self.traces += 1
        return self._traced(tf.constant(file_prefix, tf.string))

    def _write_traced(self, file_prefix: tf.Tensor) -> tf.Tensor:
        assert self._eager_save is not None
        return self._eager_save(file_prefix, options=checkpoint_options.CheckpointOptions())


def _io_options(options: Any) -> bool:
    """True for options that change how a checkpoint is written (an I/O device, async, sharding, no slots), which a traced
    save leaves to TensorFlow; the manager's own write callbacks run after the save either way."""
    if options is None:
        return False
    return bool(getattr(options, "experimental_io_device", None)
                or getattr(options, "experimental_enable_async_checkpoint", False)
                or getattr(options, "experimental_sharding_callback", None)
                or getattr(options, "experimental_skip_slot_variables", False))
