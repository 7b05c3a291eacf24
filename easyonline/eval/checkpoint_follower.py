"""Which checkpoints of a model_dir are new since the last look, oldest first.

A local model_dir lists every checkpoint the trainer still keeps, so none
is skipped even when several appear between two looks. For an ``oss://``
model_dir only the latest is fetched, into a cache of the eval job's own
(never the trainer's, whose unpushed saves a fetch would drop).
"""
import os
import re
from typing import List, Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.checkpoint.mirror import CheckpointMirror, cache_dir_for
from easyonline.utils import fileio

tf = ensure_legacy_keras()
_STEP = re.compile(r"-(\d+)$")


def step_of(prefix: str) -> int:
    """The step in a checkpoint's name (``model.ckpt-<step>``, as the trainer saves them); -1 if none."""
    match = _STEP.search(prefix)
    return int(match.group(1)) if match else -1


class CheckpointFollower:
    def __init__(self, model_dir: str, after_step: int = -1):
        self.model_dir = model_dir
        self.after_step = after_step
        self._mirror = CheckpointMirror(model_dir, cache_dir_for(model_dir) + "-eval") \
            if fileio.is_oss(model_dir) else None
        self._remote_state: Optional[str] = None

    def _listed(self) -> List[str]:
        if self._mirror is None:
            state = tf.train.get_checkpoint_state(self.model_dir)
            if state is None:
                return []
            return [p if os.path.isabs(p) else os.path.join(self.model_dir, p)
                    for p in state.all_model_checkpoint_paths]
        state_path = fileio.join(self.model_dir, "checkpoint")
        text = fileio.read_text(state_path) if fileio.exists(state_path) else None
        if text is None or text == self._remote_state:
            return []
        self._remote_state = text
        latest = self._mirror.pull()
        return [latest] if latest else []

    def new_checkpoints(self) -> List[str]:
        """Checkpoints newer than the last one returned, oldest first (the caller evaluates them in order)."""
        fresh = sorted((p for p in self._listed() if step_of(p) > self.after_step), key=step_of)
        fresh = [p for p in fresh if tf.io.gfile.exists(p + ".index")]  # pruned by the trainer meanwhile
        if fresh:
            self.after_step = step_of(fresh[-1])
        return fresh
