"""The leftovers of a checkpoint save that was killed before it finished, found and removed.

TensorFlow's sharded save (every ps cluster's, and a single process's with
sharded tables) writes each shard into ``<prefix>_temp/`` and merges them into
``<prefix>.index`` / ``.data-*`` at the end. A trainer killed between the two
leaves that folder behind: it is never read, and nothing else removes it, so
on a trainer that is killed now and then it grows the disk by a checkpoint's
size each time. Only the trainer that holds model_dir's writer lock removes
them (a reader could otherwise delete a save in progress).
"""
import logging
import os
import re
import shutil
from typing import List

log = logging.getLogger(__name__)
_TEMP = re.compile(r"^model\.ckpt-\d+_temp$")


def remove_interrupted_saves(folder: str) -> List[str]:
    """Deletes every ``model.ckpt-N_temp/`` folder in ``folder`` (a local directory); returns their paths."""
    if not os.path.isdir(folder):
        return []
    removed = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if _TEMP.match(name) and os.path.isdir(path):
            log.warning("removing %s: the shards of a checkpoint save that was interrupted before its merge", path)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
