"""Publishes update messages as files, for users without Kafka.

Each message is ``update-<sequence>.pb`` plus an empty ``.done`` file written
after it: a reader only takes messages whose done-file exists, so it never
sees half a file even on stores without atomic rename.
"""
from typing import List, Tuple

from easyonline.updates.readers import DONE_SUFFIX, update_file_name
from easyonline.utils import fileio


class DirectorySink:
    def __init__(self, directory: str):
        self.directory = directory
        self.description = f"directory {directory}"
        self.target = self.description

    def connect(self) -> None:
        fileio.makedirs(self.directory)

    def send(self, messages: List[Tuple[int, bytes]], key: bytes) -> None:
        """Writes (sequence, message) pairs in order; a file of the same number with other bytes is another
        publisher's (two models in one directory): ValueError, nothing overwritten."""
        del key
        for sequence, data in messages:
            path = fileio.join(self.directory, update_file_name(sequence))
            if fileio.exists(path + DONE_SUFFIX) and fileio.read_bytes(path) != data:  # (equal: a retried send)
                raise ValueError(f"{path} exists with other contents: another publisher writes to "
                                 f"{self.directory}; give each model its own incr_save_dir")
            fileio.write_bytes_atomic(path, data)
            fileio.write_bytes_atomic(path + DONE_SUFFIX, b"")

    def reset(self) -> None:
        pass

    def close(self) -> None:
        pass
