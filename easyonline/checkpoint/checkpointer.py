"""Checkpoints holding the model, its tables, the optimizer slots and the stream positions.

The Kafka positions are part of the same TF checkpoint (positions.py), so
they are saved atomically with the parameters: TensorFlow writes the
``checkpoint`` state file only after the data and index files, and a
checkpoint that is not named there is never restored.
"""
import logging
from typing import Dict, Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.checkpoint.mirror import CheckpointMirror, reader_cache
from easyonline.checkpoint.positions import StreamPositions
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


class Checkpointer:
    """Saves and restores (model, optimizer, step, positions) under model_dir (local, or oss:// mirrored)."""

    def __init__(self, model_dir: str, model, optimizer, keep_checkpoint_max: int = 10):
        self.model_dir = model_dir
        self.mirror = CheckpointMirror(model_dir, keep=keep_checkpoint_max) if fileio.is_oss(model_dir) else None
        # Where TensorFlow reads and writes: model_dir itself, or the local cache of an oss:// one.
        self.local_dir = self.mirror.local if self.mirror else model_dir
        if self.mirror:
            self.mirror.pull()
        self.model = model
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.samples = tf.Variable(0, dtype=tf.int64, trainable=False, name="samples_trained")
        self._positions = StreamPositions()
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=self.step,
                                              samples=self.samples, positions=self._positions.variable)
        self.manager = tf.train.CheckpointManager(self.checkpoint, self.local_dir, max_to_keep=keep_checkpoint_max,
                                                  checkpoint_name=CHECKPOINT_NAME)
        self.last_saved_step = -1

    @property
    def positions(self) -> Dict[int, int]:
        return self._positions.value()

    @property
    def positions_topic(self) -> str:
        """The topic the positions are for ("" if the checkpoint predates saving it)."""
        return self._positions.topic()

    def save(self, positions: Dict[int, int], topic: str = "") -> str:
        self._positions.assign(positions, topic)
        path = self.manager.save(checkpoint_number=int(self.step.numpy()))
        if self.mirror:
            path = self.mirror.push(path, self.manager.checkpoints)
        self.last_saved_step = int(self.step.numpy())
        return path

    def restore_latest(self) -> Optional[str]:
        """Restores the newest complete checkpoint of model_dir; returns its path or None."""
        path = self.manager.latest_checkpoint
        if path is None:
            return None
        # TFRA's per-batch "shadow" buffers are deliberately not saved, so the strict
        # assert_existing_objects_matched() cannot hold; check the step instead.
        self.checkpoint.restore(path).expect_partial()
        saved_step = checkpoint_step(path)
        if saved_step != int(self.step.numpy()):
            raise RuntimeError(f"restoring {path} failed: step {int(self.step.numpy())} != saved {int(saved_step)}")
        self.last_saved_step = int(self.step.numpy())
        if self.mirror:
            path = fileio.join(self.model_dir, path.rsplit("/", 1)[-1])
        log.info("restored %s (step %d, positions %s)", path, self.last_saved_step, self.positions)
        return path

    def init_from(self, fine_tune_checkpoint: str) -> str:
        """Initialises the model (tables included) from another run's checkpoint; not its positions or step."""
        path = latest_checkpoint(fine_tune_checkpoint)
        if path is None:
            raise FileNotFoundError(f"train_config.fine_tune_checkpoint: no checkpoint at {fine_tune_checkpoint}")
        tf.train.Checkpoint(model=self.model).restore(path).expect_partial()
        log.info("initialised the model from %s", path)
        return path


def write_pipeline_config(model_dir: str, text: str) -> None:
    fileio.write_text_atomic(fileio.join(model_dir, "pipeline.config"), text)
