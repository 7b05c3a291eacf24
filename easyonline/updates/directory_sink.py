"""Publishes update messages as files, for users without Kafka.

Each message is ``update-<stream id>-<sequence>.pb`` plus an empty ``.done``
file written after it: a reader only takes messages whose done-file exists,
so it never sees half a file even on stores without atomic rename. The
stream id in the name means a new stream (numbered from 1 again) never
collides with an old one's files. After each send, ``LATEST`` names the
newest message ("<stream id> <sequence>"): a reader at the head of that stream
polls by reading it, not by listing the directory (readers.py).

Retention: after a send (at most every ``CLEAN_EVERY_SECS``) and at close,
the writer deletes the oldest files beyond the newest ``retention_messages``
and those older than ``retention_secs`` (0: no bound), the done-file first.
Files of other (older) streams go before this stream's. A reader that
lagged past them finds a gap, counts it, and heals at the next full sync.
"""
import logging
import time
from typing import List, Optional, Tuple

from easyonline.core.errors import error_text
from easyonline.updates.readers import DONE_SUFFIX, LATEST_FILE, header_of, latest_text, list_update_files, update_file_name
from easyonline.utils import fileio

log = logging.getLogger(__name__)
CLEAN_EVERY_SECS = 5.0


class DirectorySink:
    def __init__(self, directory: str, retention_messages: int = 0, retention_secs: float = 0):
        self.directory = directory
        self.description = f"directory {directory}"
        self.target = self.description
        self.retention_messages = retention_messages
        self.retention_secs = retention_secs
        self.stream_id: Optional[int] = None  # of the messages sent (from their headers)
        self.deleted = 0
        self._next_clean = 0.0

    def connect(self) -> None:
        fileio.makedirs(self.directory)

    def send(self, messages: List[Tuple[int, bytes]], key: bytes) -> None:
        """Writes (sequence, message) pairs in order; a file of the same stream and number with other bytes is
        another publisher's (two models in one directory): ValueError, nothing overwritten."""
        del key
        newest = None
        for sequence, data in messages:
            header = header_of(data)
            stream_id = header.stream_id if header is not None else 0
            self.stream_id = stream_id
            path = fileio.join(self.directory, update_file_name(sequence, stream_id))
            if fileio.exists(path + DONE_SUFFIX) and fileio.read_bytes(path) != data:  # (equal: a retried send)
                raise ValueError(f"{path} exists with other contents: another publisher writes to "
                                 f"{self.directory}; give each model its own incr_save_dir")
            fileio.write_bytes_atomic(path, data)
            fileio.write_bytes_atomic(path + DONE_SUFFIX, b"")
            newest = (stream_id, sequence)
        if newest is not None:  # after the messages' done-files: every message it names is complete
            fileio.write_bytes_atomic(fileio.join(self.directory, LATEST_FILE), latest_text(*newest))
        if time.time() >= self._next_clean:
            self.clean()

    def clean(self) -> int:
        """Deletes the files retention no longer keeps; the number deleted. Never raises (logs)."""
        self._next_clean = time.time() + CLEAN_EVERY_SECS
        if not (self.retention_messages or self.retention_secs):
            return 0
        try:
            groups = list_update_files(self.directory)
            # oldest first: other streams (older than the one this writer numbers), then this stream's
            order = [(key, s) for key in sorted((k for k in groups if k != self.stream_id), key=lambda k: k or -1)
                     for s in groups[key]] + [(self.stream_id, s) for s in groups.get(self.stream_id, [])]
            extra = max(len(order) - self.retention_messages, 0) if self.retention_messages else 0
            cutoff = time.time() - self.retention_secs if self.retention_secs else None
            deleted = 0
            for index, (key, sequence) in enumerate(order[:-1]):  # the newest file always stays
                path = fileio.join(self.directory, update_file_name(sequence, key))
                if index >= extra:
                    if cutoff is None:
                        break
                    header = header_of(fileio.read_bytes(path))
                    if header is not None and header.create_time >= cutoff:
                        break
                fileio.remove_file(path + DONE_SUFFIX)  # readers take only files with a done-file
                fileio.remove_file(path)
                deleted += 1
            self.deleted += deleted
            return deleted
        except Exception as e:  # pylint: disable=broad-except  (retention must not stop publishing)
            log.warning("deleting old update files in %s failed (%s); retrying later", self.directory,
                        error_text(e))
            return 0

    def reset(self) -> None:
        pass

    def close(self) -> None:
        self.clean()
