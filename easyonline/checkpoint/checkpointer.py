"""Checkpoints holding the model, its tables, the optimizer slots and the stream positions.

The Kafka positions are part of the same TF checkpoint (positions.py), so
they are saved atomically with the parameters: TensorFlow writes the
``checkpoint`` state file only after the data and index files, and a
checkpoint that is not named there is never restored.

One checkpointer serves both step engines: a single process's variables are
read eagerly (``EagerIO``); a cluster trainer's live in a graph on the ps
and are read and restored through its session, with every file written on
the chief (``distributed/checkpoint_io.py`` ``SessionIO``).
"""
import contextlib
import logging
from typing import Any, ContextManager, Dict, Optional, Protocol

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.checkpoint.mirror import CheckpointMirror, reader_cache
from easyonline.checkpoint.positions import StreamPositions
from easyonline.checkpoint.traced_save import TracedSaves
from easyonline.utils import fileio

tf = ensure_legacy_keras()
log = logging.getLogger(__name__)
CHECKPOINT_NAME = "model.ckpt"


def latest_checkpoint(path: str) -> Optional[str]:
    """A checkpoint prefix from a directory (its latest) or a prefix itself; None if there is none.

    For an oss:// directory, its latest checkpoint is fetched into a cache of this process first
    (not the trainer's: see mirror.py).
    """
    if fileio.is_oss(path):
        return CheckpointMirror(path, reader_cache(path)).pull()
    if tf.io.gfile.isdir(path):
        return tf.train.latest_checkpoint(path)
    if tf.io.gfile.exists(path + ".index"):
        return path
    return None


def checkpoint_step(path: str) -> int:
    """The training step a checkpoint (prefix) was saved at."""
    return int(tf.train.load_checkpoint(path).get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE"))


class VariableIO(Protocol):
    """How a checkpointer reaches the variables it saves (the step engine's side of checkpointing)."""

    options: Any  # tf.train.CheckpointOptions of every save and restore, or None

    def read(self, variable: Any) -> Any:
        """A variable's value, as numpy."""

    def context(self) -> ContextManager:
        """Entered around building, saving and restoring (a graph and its session, or nothing)."""

    def finish_restore(self, status: Any) -> None:
        """Completes a restore (a session runs its ops; eagerly it is done already)."""


class EagerIO:
    """A single process's variables: read eagerly, restored at once."""

    options = None

    def read(self, variable: Any) -> Any:
        return variable.numpy()

    def context(self) -> ContextManager:
        return contextlib.nullcontext()

    def finish_restore(self, status: Any) -> None:
        pass


class Checkpointer:
    """Saves and restores (model, optimizer, step, samples, positions) under model_dir (local, or oss://
    mirrored): the one checkpointer of both step engines.

    A single process passes only the model and optimizer: the step, samples and positions variables are
    made here. A cluster trainer passes its shared step and samples, its graph's positions and a
    ``SessionIO``, and ``pull=False`` (only the chief pulls an oss:// mirror, when it restores).
    """

    def __init__(self, model_dir: str, model, optimizer, keep_checkpoint_max: int = 10, step=None, samples=None,
                 positions: Optional[StreamPositions] = None, io: Optional[VariableIO] = None, pull: bool = True):
        self.model_dir = model_dir
        self.keep_checkpoint_max = keep_checkpoint_max
        self.mirror = CheckpointMirror(model_dir, keep=keep_checkpoint_max) if fileio.is_oss(model_dir) else None
        # Where TensorFlow reads and writes: model_dir itself, or the local cache of an oss:// one.
        self.local_dir = self.mirror.local if self.mirror else model_dir
        self.io: VariableIO = io or EagerIO()
        self.model = model
        with self.io.context():
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step") if step is None else step
            self.samples = tf.Variable(0, dtype=tf.int64, trainable=False, name="samples_trained") \
                if samples is None else samples
            self._positions = positions or StreamPositions()
            self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=self.step,
                                                  samples=self.samples, positions=self._positions.variable)
        # A single process's saves run as one traced call (traced_save.py); a cluster's run in its session.
        self.traced_saves = TracedSaves(self.checkpoint) if isinstance(self.io, EagerIO) else None
        if self.traced_saves is not None:
            self.traced_saves.install()
        if pull:
            self.pull()
        else:
            self._new_manager()
        self.last_saved_step = -1

    def pull(self) -> None:
        """Fetches an oss:// model_dir's newest checkpoint into the local cache (nothing for a local one)."""
        if self.mirror:
            self.mirror.pull()
        self._new_manager()  # (a manager reads the checkpoint state file when it is made)

    def _new_manager(self) -> None:
        with self.io.context():
            self.manager = tf.train.CheckpointManager(self.checkpoint, self.local_dir,
                                                      max_to_keep=self.keep_checkpoint_max,
                                                      checkpoint_name=CHECKPOINT_NAME)

    @property
    def positions(self) -> Dict[int, int]:
        return self._positions.value()

    @property
    def positions_topic(self) -> str:
        """The topic the positions are for ("" if the checkpoint predates saving it)."""
        return self._positions.topic()

    @property
    def positions_topic_id(self) -> str:
        """Kafka's id of that topic ("" if unknown: a checkpoint from before ids were saved, or files)."""
        return self._positions.topic_id()

    def save(self, positions: Dict[int, int], topic: str = "", topic_id: str = "") -> str:
        self._positions.assign(positions, topic, topic_id)
        step = int(self.io.read(self.step))
        with self.io.context():
            path = self.manager.save(checkpoint_number=step, options=self.io.options)
        if self.mirror:
            path = self.mirror.push(path, self.manager.checkpoints)
        self.last_saved_step = step
        return path

    def restore_latest(self) -> Optional[str]:
        """Restores the newest complete checkpoint of model_dir; returns its path or None."""
        path = self.manager.latest_checkpoint
        if path is None:
            return None
        # TFRA's per-batch "shadow" buffers are deliberately not saved, so the strict
        # assert_existing_objects_matched() cannot hold; check the step instead.
        with self.io.context():
            self.io.finish_restore(self.checkpoint.restore(path, options=self.io.options).expect_partial())
        saved_step = checkpoint_step(path)
        step = int(self.io.read(self.step))
        if saved_step != step:
            raise RuntimeError(f"restoring {path} failed: step {step} != saved {int(saved_step)}")
        self.last_saved_step = step
        if self.mirror:
            path = fileio.join(self.model_dir, path.rsplit("/", 1)[-1])
        log.info("restored %s (step %d, positions %s)", path, self.last_saved_step, self.positions)
        return path

    def init_from(self, fine_tune_checkpoint: str) -> str:
        """Initialises the model (tables included) from another run's checkpoint; not its positions or step."""
        path = latest_checkpoint(fine_tune_checkpoint)
        if path is None:
            raise FileNotFoundError(f"train_config.fine_tune_checkpoint: no checkpoint at {fine_tune_checkpoint}")
        with self.io.context():
            self.io.finish_restore(tf.train.Checkpoint(model=self.model).restore(path, options=self.io.options)
                                   .expect_partial())
        log.info("initialised the model from %s", path)
        return path

    def note_fine_tune_ignored(self, fine_tune_checkpoint: str, restored: str) -> None:
        """Says that ``fine_tune_checkpoint`` is not used because model_dir's own checkpoint ``restored`` was."""
        if fine_tune_checkpoint:
            log.warning("train_config.fine_tune_checkpoint %s is ignored: model_dir %s already has a checkpoint "
                        "(%s), and this run continues from it (its parameters and positions). To start from "
                        "fine_tune_checkpoint, use a model_dir without checkpoints.",
                        fine_tune_checkpoint, self.model_dir, restored)


def write_pipeline_config(model_dir: str, text: str) -> None:
    fileio.write_text_atomic(fileio.join(model_dir, "pipeline.config"), text)
