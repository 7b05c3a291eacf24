"""CSV files as a finite batch source, for offline training and tests."""
import glob
from typing import BinaryIO, List, Optional, Sequence

from easyonline.inputs.raw_batch import BatchSource, RawBatch


def expand_paths(patterns: Sequence[str]) -> List[str]:
    paths: List[str] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern))
        if not matches:
            raise FileNotFoundError(f"input file {pattern!r} matches no file")
        paths.extend(matches)
    return paths


class FileInput(BatchSource):
    """Reads lines from files in order; ``positions`` is {file index: lines read}."""

    def __init__(self, patterns: Sequence[str], batch_size: int):
        self._paths = expand_paths(patterns)
        self._batch_size = batch_size
        self._file_index = 0
        self._handle: Optional[BinaryIO] = None
        self._lines_read = 0
        self._done = False

    @property
    def exhausted(self) -> bool:
        return self._done

    def next_batch(self, timeout: float = 0.0) -> Optional[RawBatch]:
        lines: List[bytes] = []
        while len(lines) < self._batch_size and not self._done:
            if self._handle is None:
                if self._file_index >= len(self._paths):
                    self._done = True
                    break
                self._handle = open(self._paths[self._file_index], "rb")
            line = self._handle.readline()
            if not line:
                self._handle.close()
                self._handle = None
                self._file_index += 1
                self._lines_read = 0
                continue
            self._lines_read += 1
            lines.append(line.rstrip(b"\n"))
        if not lines:
            return None
        return RawBatch(lines, {self._file_index: self._lines_read}, lag=None, messages=len(lines))

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
