"""Checkpoints of an ``oss://`` model_dir: written locally by TensorFlow, then mirrored to OSS.

Stock TensorFlow cannot write checkpoints to OSS, so the Checkpointer works
in a local cache directory and this mirror keeps OSS the source of truth:

- ``push`` uploads a new checkpoint's data and index files, then the
  ``checkpoint`` state file naming it, last (each object appears whole: a
  reader of OSS never sees a checkpoint whose files are not all there), then
  deletes the checkpoints the state no longer keeps. Files are streamed from
  disk, a file larger than one part as a multipart upload (``oss.upload_file``):
  OSS refuses a single put past 5 GB, and a large model's data file is more;
- ``pull`` makes the cache hold exactly the checkpoint the OSS state file
  names (a local save that never reached OSS is dropped, and so is the
  ``model.ckpt-N_temp/`` folder of a sharded save killed before its merge: the Kafka positions
  committed to the group are the ones OSS has). The older checkpoints that
  state keeps stay on OSS and in its history: a restart does not delete them.

The trainer's cache is ``$EASYONLINE_CACHE_DIR`` (default
``<tmp>/easyonline-cache``) plus the bucket and path. Readers (export,
predict, evaluation) fetch into a cache of their own (``reader_cache``), so
they never touch the files the trainer is about to push.
"""
import atexit
import logging
import os
import re
import shutil
import tempfile
from typing import List, Optional

from easyonline.checkpoint.interrupted_saves import remove_interrupted_saves
from easyonline.utils import fileio

log = logging.getLogger(__name__)
STATE_FILE = "checkpoint"
_PATH = re.compile(r'^(model_checkpoint_path|all_model_checkpoint_paths): "(.*)"$', re.M)


def cache_dir_for(remote: str) -> str:
    base = os.environ.get("EASYONLINE_CACHE_DIR") or os.path.join(tempfile.gettempdir(), "easyonline-cache")
    return os.path.join(base, re.sub(r"[^A-Za-z0-9_.\-]+", "_", remote[len("oss://"):].strip("/")))


def reader_cache(remote: str) -> str:
    """A cache of this process only, for reading ``remote``'s checkpoints; removed when the process exits."""
    os.makedirs(cache_dir_for(remote) + "-readers", exist_ok=True)
    path = tempfile.mkdtemp(prefix=f"pid{os.getpid()}-", dir=cache_dir_for(remote) + "-readers")
    atexit.register(shutil.rmtree, path, True)
    return path


def state_text(latest: str, kept: List[str]) -> str:
    """A CheckpointState in text format, with names relative to the directory (as CheckpointManager writes)."""
    lines = [f'model_checkpoint_path: "{latest}"'] + [f'all_model_checkpoint_paths: "{name}"' for name in kept]
    return "\n".join(lines) + "\n"


def _names(text: str, field: str) -> List[str]:
    return [os.path.basename(m.group(2)) for m in _PATH.finditer(text) if m.group(1) == field]


class CheckpointMirror:
    """``keep``: how many checkpoints OSS keeps (the trainer's ``keep_checkpoint_max``; 0: those ``push`` is given)."""

    def __init__(self, remote: str, local: Optional[str] = None, keep: int = 0):
        self.remote = remote.rstrip("/")
        self.local = local or cache_dir_for(remote)
        self.keep = keep
        # the checkpoints OSS kept when pulled, oldest first: still part of the history
        self._earlier: List[str] = []

    def _files_of(self, names: List[str], name: str) -> List[str]:
        return [n for n in names if n == name + ".index" or n.startswith(name + ".data-")]

    def pull(self) -> Optional[str]:
        """Makes the cache hold the checkpoint OSS names as latest; returns its local prefix or None."""
        os.makedirs(self.local, exist_ok=True)
        remove_interrupted_saves(self.local)  # (this cache is the trainer's own)
        for name in os.listdir(self.local):
            if name == STATE_FILE or name.startswith("model.ckpt"):
                os.remove(os.path.join(self.local, name))
        state_path = fileio.join(self.remote, STATE_FILE)
        if not fileio.exists(state_path):
            return None
        state = fileio.read_text(state_path)
        latest = _names(state, "model_checkpoint_path")
        if not latest:
            return None
        name = latest[0]
        # (TensorFlow's CheckpointManager in the cache starts with an empty list of checkpoints: the state
        # pull writes has no timestamps, so even the restored one is only in this history)
        self._earlier = [n for n in _names(state, "all_model_checkpoint_paths") if n != name] + [name]
        files = self._files_of(fileio.listdir(self.remote), name)
        if not any(f.endswith(".index") for f in files):
            raise FileNotFoundError(f"{state_path} names {name}, but {self.remote} lacks {name}.index")
        for file_name in files:
            fileio.copy_file(fileio.join(self.remote, file_name), os.path.join(self.local, file_name))
        fileio.write_text_atomic(os.path.join(self.local, STATE_FILE), state_text(name, [name]))
        log.info("fetched checkpoint %s from %s", name, self.remote)
        return os.path.join(self.local, name)

    def push(self, local_prefix: str, kept: List[str]) -> str:
        """Uploads a checkpoint saved in the cache, then the state naming it; returns its oss:// prefix."""
        name = os.path.basename(local_prefix)
        for file_name in self._files_of(sorted(os.listdir(self.local)), name):
            fileio.copy_file(os.path.join(self.local, file_name), fileio.join(self.remote, file_name))
        managed = [os.path.basename(k) for k in kept]
        kept_names = [n for n in self._earlier if n not in managed] + managed
        kept_names = kept_names[-self.keep:] if self.keep else kept_names
        self._earlier = [n for n in self._earlier if n in kept_names]
        fileio.write_text_atomic(fileio.join(self.remote, STATE_FILE), state_text(name, kept_names))
        stale = [f for f in fileio.listdir(self.remote)
                 if f.startswith("model.ckpt") and not any(f in self._files_of([f], k) for k in kept_names)]
        for file_name in stale:
            fileio.remove_file(fileio.join(self.remote, file_name))
        return fileio.join(self.remote, name)
