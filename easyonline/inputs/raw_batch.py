"""What every source hands to the trainer: lines plus where the stream stands."""
import abc
import collections.abc
import dataclasses
import functools
import types
from typing import Dict, List, Mapping, Optional, Sequence, Tuple


class BlobLines(collections.abc.Sequence):
    """The lines of a newline-joined blob, split only if someone looks (a parsed batch seldom needs them).

    A Kafka batch is read as blobs (a chunk's messages joined at once) and crosses to the trainer as one:
    splitting it into lines there, only to join them again for the parser, was work done twice.
    """

    def __init__(self, blob: bytes, count: Optional[int] = None):
        self.blob = blob
        self._count = count

    @functools.cached_property
    def _lines(self) -> List[bytes]:
        return self.blob.split(b"\n") if self.blob else []

    def __getitem__(self, index):
        return self._lines[index]

    def __len__(self) -> int:
        if self._count is None:
            self._count = self.blob.count(b"\n") + 1 if self.blob else 0
        return self._count

    def has_empty_line(self) -> bool:
        """True if a line is empty (parsers skip them, so the blob cannot be parsed as it is)."""
        blob = self.blob
        return bool(blob) and (blob[:1] == b"\n" or blob[-1:] == b"\n" or b"\n\n" in blob)


@dataclasses.dataclass
class RawBatch:
    """Sample lines and the position after them.

    ``positions`` maps partition -> next offset to read once this batch is
    trained, for every assigned partition (not only those in this batch), so
    that saving the positions of the last trained batch is exact.
    """
    lines: Sequence[bytes]
    positions: Dict[int, int]
    lag: Optional[int] = None
    messages: int = 0
    empty_messages: int = 0
    # Messages the source refused (e.g. oversized): (first bytes, reason), counted like bad lines.
    rejected: List[Tuple[bytes, str]] = dataclasses.field(default_factory=list)
    # Set by sources that yield already-parsed batches (e.g. online_train over an iterable).
    parsed: Optional[object] = None
    # Offsets skipped so far (cumulative) because a position fell out of the partition's range while
    # reading and was moved into it (kafka_input.py; on_offset_out_of_range: RESUME_IN_RANGE).
    offsets_skipped: int = 0
    # Kafka's id of the topic ``positions`` are offsets of ("" if unknown): a checkpoint saves it with them.
    topic_id: str = ""


class BatchSource(abc.ABC):
    """A source of RawBatches; used from one thread (see Prefetcher)."""

    @abc.abstractmethod
    def next_batch(self, timeout: float) -> Optional[RawBatch]:
        """The next batch, or None if nothing arrived within ``timeout`` seconds or the source is exhausted."""

    #: The lag (messages not yet read) the source saw when its last ``next_batch`` returned
    #: None, or None when unknown: 0 means it has read everything there is (caught up).
    idle_lag: Optional[int] = None
    #: {partition: next offset} where reading started, for every partition the source reads (a stream's
    #: sources set it when they start; empty for sources without positions). The trainer's positions
    #: start from it, so a checkpoint taken before the first batch keeps every partition.
    start_offsets: Mapping[int, int] = types.MappingProxyType({})
    #: How the start was decided and which partitions it moved (inputs/start_position.py), for the summary.
    start_mode: str = ""
    #: Offsets the start moved over (a checkpoint's position below the log start: samples retention deleted
    #: before they were trained, inputs/start_position.py); the running count comes with each RawBatch.
    offsets_skipped: int = 0
    #: Kafka's id of the topic read from ``start_offsets`` ("" if unknown or not Kafka).
    topic_id: str = ""

    def partition_numbers(self) -> List[int]:
        """The partitions this source reads, in order (a cluster trainer logs its share)."""
        return sorted(self.start_offsets)

    @property
    def exhausted(self) -> bool:
        """True once a finite source has nothing more to give."""
        return False

    def commit(self, positions: Dict[int, int]) -> None:
        """Records positions as consumed (e.g. a Kafka consumer-group commit)."""

    def close(self) -> None:
        pass
