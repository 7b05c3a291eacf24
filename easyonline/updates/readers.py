"""Reads update messages back from a Kafka topic or an incr_save_dir.

Used by serving, by ``tools.read_updates`` and by the publisher itself (to
continue the sequence numbers after a restart). Readers return raw bytes
with their position (Kafka offset, or sequence number for directories);
decoding and order checks are the caller's (codec.py, apply_rules.py).
"""
import logging
import re
import time
from typing import Dict, List, Optional, Tuple

from kafka import KafkaConsumer, TopicPartition

from easyonline.config.kafka_settings import bootstrap_servers, connect_timeout
from easyonline.protos import update_pb2
from easyonline.utils import fileio

log = logging.getLogger(__name__)

PARTITION = 0
_FILE = re.compile(r"^update-(\d{12})\.pb$")
DONE_SUFFIX = ".done"


def update_file_name(sequence: int) -> str:
    return f"update-{sequence:012d}.pb"


def _header_of(data: bytes) -> Optional[update_pb2.UpdateHeader]:
    message = update_pb2.UpdateMessage()
    try:
        message.ParseFromString(data)
    except Exception:  # pylint: disable=broad-except  (garbage on the topic is not ours)
        return None
    return message.header


class KafkaUpdateReader:
    """Reads partition 0 of ``topic`` from ``start_offset``, without a consumer group."""

    def __init__(self, server: str, topic: str, start_offset: int = 0, extra: Optional[Dict] = None):
        settings = {k: v for k, v in (extra or {}).items() if k in KafkaConsumer.DEFAULT_CONFIG}
        settings.update(bootstrap_servers=bootstrap_servers(server), group_id=None, enable_auto_commit=False,
                        auto_offset_reset="earliest", request_timeout_ms=10000, **connect_timeout(5000),
                        client_id="easyonline-update-reader", max_partition_fetch_bytes=16 * 1024 * 1024,
                        fetch_max_bytes=64 * 1024 * 1024)
        self.topic = topic
        self._consumer = KafkaConsumer(**settings)
        self._tp = TopicPartition(topic, PARTITION)
        self._consumer.assign([self._tp])
        self._consumer.seek(self._tp, start_offset)

    def seek(self, offset: int) -> None:
        self._consumer.seek(self._tp, offset)

    @property
    def position(self) -> int:
        return self._consumer.position(self._tp)

    def highwater(self) -> Optional[int]:
        """The end of the partition as of the last fetch (right even where end_offsets is not)."""
        return self._consumer.highwater(self._tp)

    def lag_messages(self) -> Optional[int]:
        """Messages after the position, by the last fetch's high watermark (None before any fetch)."""
        high = self.highwater()
        return None if high is None else max(high - self.position, 0)

    def poll(self, timeout_ms: int = 500) -> List[Tuple[int, bytes]]:
        records = self._consumer.poll(timeout_ms=timeout_ms).get(self._tp, [])
        return [(r.offset, r.value) for r in records]

    def read_available(self, timeout_secs: float = 10.0) -> List[Tuple[int, bytes]]:
        """Everything from the current position to the end of the partition (bounded by ``timeout_secs``).

        Quiet polls end it only once a fetch has told where the end is: before that, a slow first
        connection would look like an empty topic."""
        out: List[Tuple[int, bytes]] = []
        deadline = time.time() + timeout_secs
        empty_polls = 0
        while time.time() < deadline:
            batch = self.poll(200)
            out.extend(batch)
            high = self.highwater()
            if not batch and high is not None:
                empty_polls += 1
                if self.position >= high or empty_polls >= 5:
                    break
        return out

    def start_after_step(self, model_name: str, step: int, window: int = 256
                         ) -> Tuple[int, int, Optional[int]]:
        """(offset, sequence, stream id) of the first message of ``model_name`` made after ``step``: where a
        model exported from that step starts following. The end of the topic when there is none yet (stream
        id None when the topic holds no message of the model: the reader takes the first stream it meets)."""
        begin, end = self._bounds()
        hi = end
        records: List[Tuple[int, Optional[update_pb2.UpdateHeader]]] = []
        while True:
            lo = max(begin, hi - window)
            records = self._read_range(lo, hi) + records
            ours = [(offset, h) for offset, h in records if h is not None and h.model_name == model_name]
            if lo <= begin or (ours and ours[0][1].global_step <= step):
                newer = [(offset, h) for offset, h in ours if h.global_step > step]
                if newer:
                    return newer[0][0], newer[0][1].sequence, newer[0][1].stream_id
                if ours:
                    return max(records[-1][0] + 1, end), ours[-1][1].sequence + 1, ours[-1][1].stream_id
                return end, 1, None
            hi, window = lo, min(window * 2, 65536)

    def _bounds(self) -> Tuple[int, int]:
        """(first, end) offsets of the partition: retention may have removed the messages before the first."""
        begin = self._consumer.beginning_offsets([self._tp]).get(self._tp) or 0
        return begin, max(self._consumer.end_offsets([self._tp]).get(self._tp) or 0, begin)

    def _read_range(self, start: int, end: int, timeout_secs: float = 30.0
                    ) -> List[Tuple[int, Optional[update_pb2.UpdateHeader]]]:
        """(offset, header or None) of the messages in [start, end)."""
        out: List[Tuple[int, Optional[update_pb2.UpdateHeader]]] = []
        if start >= end:
            return out
        self.seek(start)
        deadline, empty_polls = time.time() + timeout_secs, 0
        while self.position < end and time.time() < deadline and empty_polls < 5:
            batch = self.poll(200)
            empty_polls = 0 if batch else empty_polls + 1
            out.extend((offset, _header_of(value)) for offset, value in batch if offset < end)
        return out

    def close(self) -> None:
        self._consumer.close()


class DirectoryUpdateReader:
    """Reads ``incr_save_dir``: messages whose done-file exists, in sequence order."""

    def __init__(self, directory: str, start_sequence: int = 1):
        self.directory = directory
        self.next_sequence = start_sequence

    def sequences(self) -> List[int]:
        names = set(fileio.listdir(self.directory))
        return sorted(int(m.group(1)) for n in names if (m := _FILE.match(n)) and n + DONE_SUFFIX in names)

    def poll(self, timeout_ms: int = 500) -> List[Tuple[int, bytes]]:
        """What is complete now (files do not block: ``timeout_ms`` is ignored)."""
        del timeout_ms
        return self.read_available()

    def lag_messages(self) -> Optional[int]:
        return len([s for s in self.sequences() if s >= self.next_sequence])

    def read_available(self) -> List[Tuple[int, bytes]]:
        out = []
        for sequence in self.sequences():
            if sequence >= self.next_sequence:
                out.append((sequence, fileio.read_bytes(fileio.join(self.directory, update_file_name(sequence)))))
                self.next_sequence = sequence + 1
        return out

    def start_after_step(self, model_name: str, step: int) -> Tuple[int, int, Optional[int]]:
        """(sequence, sequence, stream id) of the first message made after ``step`` (see KafkaUpdateReader)."""
        sequences = self.sequences()
        stream_id = None
        for sequence in reversed(sequences):
            header = _header_of(fileio.read_bytes(fileio.join(self.directory, update_file_name(sequence))))
            if header is not None and header.model_name == model_name:
                stream_id = header.stream_id if stream_id is None else stream_id
                if header.global_step <= step:
                    return sequence + 1, sequence + 1, header.stream_id
        first = sequences[0] if sequences else 1
        return first, first, stream_id

    def close(self) -> None:
        pass
