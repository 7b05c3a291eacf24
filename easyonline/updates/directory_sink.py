"""Publishes update messages as files, for users without Kafka.

Each message is ``update-<sequence>.pb`` plus an empty ``.done`` file written
after it: a reader only takes messages whose done-file exists, so it never
sees half a file even on stores without atomic rename.
"""
from typing import List, Optional, Tuple

from easyonline.protos import update_pb2
from easyonline.updates.readers import DONE_SUFFIX, DirectoryUpdateReader, update_file_name
from easyonline.utils import fileio


class DirectorySink:
    def __init__(self, directory: str):
        self.directory = directory
        self.description = f"directory {directory}"

    def connect(self) -> None:
        fileio.makedirs(self.directory)

    def last_header(self, model_name: str) -> Optional[update_pb2.UpdateHeader]:
        return DirectoryUpdateReader(self.directory).last_header(model_name)

    def send(self, messages: List[Tuple[int, bytes]], key: bytes) -> None:
        """Writes (sequence, message) pairs in order."""
        del key
        for sequence, data in messages:
            path = fileio.join(self.directory, update_file_name(sequence))
            fileio.write_bytes_atomic(path, data)
            fileio.write_bytes_atomic(path + DONE_SUFFIX, b"")

    def reset(self) -> None:
        pass

    def close(self) -> None:
        pass
