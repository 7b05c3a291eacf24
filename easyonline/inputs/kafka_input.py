"""Reads CSV samples from every partition of a Kafka topic, in batches with a max wait.

Batches end at message boundaries, so the position after a batch (the next
offset of every partition) is exact and can be saved with a checkpoint.
The consumer is not thread-safe: everything, commits included, runs on the
thread that calls ``next_batch`` (the Prefetcher's).
"""
import logging
import operator
import queue
import time
from typing import Dict, List, Optional, Tuple

from kafka import TopicPartition

from easyonline.core.rejections import OVERSIZED_MESSAGE, rejection
from easyonline.inputs import fast_records, kafka_client
from easyonline.inputs.confluent_consumer import ConfluentDataConsumer
from easyonline.inputs.raw_batch import BatchSource, BlobLines, RawBatch
from easyonline.inputs.start_position import resolve_start_offsets, usable_checkpoint_positions
from easyonline.protos import pipeline_pb2

log = logging.getLogger(__name__)
_value = operator.attrgetter("value")  # of kafka-python's records
_offset = operator.attrgetter("offset")


class KafkaInput(BatchSource):
    """A batch source over one topic; see ``resolve_start_offsets`` for where it starts."""

    def __init__(self, kafka: pipeline_pb2.KafkaInput, batch_size: int, batch_timeout_ms: int,
                 checkpoint_positions: Optional[Dict[int, int]] = None, path: str = "kafka_train_input",
                 partition_wait_secs: float = 30.0, max_message_bytes: int = 0, compiled_decoder: bool = True,
                 partition_share: Optional[Tuple[int, int]] = None, checkpoint_topic: str = ""):
        self._kafka = kafka
        self._max_message_bytes = max_message_bytes
        self._batch_size = batch_size
        self._batch_timeout = batch_timeout_ms / 1000.0
        self._consumer = kafka_client.make_consumer(kafka, path, max_poll_records=max(batch_size, 500),
                                                    fetch_max_wait_ms=min(100, max(batch_timeout_ms, 1)))
        control = self._consumer  # finds partitions and start positions; kafka-python with either client
        self.partitions = self._discover(path, partition_wait_secs)
        checkpoint_positions = usable_checkpoint_positions(checkpoint_positions, checkpoint_topic, kafka,
                                                           [tp.partition for tp in self.partitions])
        if partition_share is not None:  # (i, n): this reader is the i-th of n, it reads p with p % n == i
            index, count = partition_share
            self.partitions = tuple(tp for tp in self.partitions if tp.partition % count == index)
        probe = kafka_client.make_consumer(kafka, path + ".probe", group_id=None, fetch_max_wait_ms=50)
        try:
            offsets, self.start_mode = resolve_start_offsets(control, probe, self.partitions, kafka,
                                                              checkpoint_positions)
        finally:
            probe.close()
        if kafka.client == pipeline_pb2.KafkaInput.CONFLUENT_KAFKA:
            control.close()
            self._consumer = ConfluentDataConsumer(kafka, path)
            self._value, self._offset = self._consumer.record_value, self._consumer.record_offset
        else:  # kafka-python reads the data too, with the fast record decoder (compiled False: Python's)
            fast_records.install(self._consumer, compiled=compiled_decoder)
            self._value, self._offset = _value, _offset
        self._consumer.assign(list(self.partitions))
        for tp in self.partitions:
            self._consumer.seek(tp, offsets[tp.partition])
        self.start_offsets = dict(offsets)
        self._positions = dict(offsets)
        self._commits: "queue.Queue[Dict[int, int]]" = queue.Queue()
        self._lines_per_message = 0.0  # running estimate, to ask poll() for about one batch of lines
        log.info("reading %s partitions %s from %s (%s, %s): %s", kafka.topic, sorted(offsets), kafka.server,
                 self.start_mode, pipeline_pb2.KafkaInput.Client.Name(kafka.client).lower(), offsets)

    def _discover(self, path: str, wait_secs: float) -> Tuple[TopicPartition, ...]:
        deadline = time.time() + wait_secs
        while True:
            partitions = self._consumer.partitions_for_topic(self._kafka.topic)
            if partitions:
                return tuple(TopicPartition(self._kafka.topic, p) for p in sorted(partitions))
            if time.time() >= deadline:
                raise kafka_client.BrokerUnreachableError(
                    f"{path}.topic: topic {self._kafka.topic!r} not found on {self._kafka.server} after {wait_secs:.0f}s")
            self._consumer.topics()  # refreshes metadata
            time.sleep(0.5)

    def lag(self) -> Optional[int]:
        """Messages on the broker not yet read, from the fetch high watermarks (None before the first fetch)."""
        total = 0
        for tp in self.partitions:
            high = self._consumer.highwater(tp)
            if high is None:
                return None
            total += max(high - self._positions[tp.partition], 0)
        return total

    def next_batch(self, timeout: float) -> Optional[RawBatch]:
        self._run_commits()
        pieces: List[bytes] = []  # each chunk's messages joined: the batch is one blob (raw_batch.BlobLines)
        lines = 0
        refused: list = []
        messages = empty = 0
        started = time.time()
        first_at = None
        while lines < self._batch_size:
            now = time.time()
            if first_at is None:
                remaining = timeout - (now - started)
            else:
                remaining = self._batch_timeout - (now - first_at)
            if remaining <= 0:
                break
            wanted = self._batch_size - lines
            if self._lines_per_message:
                wanted = max(1, int(wanted / self._lines_per_message))
            else:
                wanted = min(wanted, 16)
            records = self._consumer.poll(timeout_ms=max(int(remaining * 1000), 1), max_records=wanted)
            got = 0
            for tp, chunk in records.items():
                got += len(chunk)
                self._positions[tp.partition] = self._offset(chunk[-1]) + 1
                values = list(map(self._value, chunk))
                if self._max_message_bytes and max(map(len, filter(None, values)), default=0) \
                        > self._max_message_bytes:
                    values = self._refuse_oversized(tp, chunk, refused)
                empties = values.count(b"") + values.count(None)
                if empties:  # an empty message is counted, not a sample
                    empty += empties
                    values = [value for value in values if value]
                if not values:
                    continue
                piece = b"\n".join(values)
                added = piece.count(b"\n") + 1  # several lines per message are allowed
                pieces.append(piece)
                lines += added
                per_message = added / len(values)
                self._lines_per_message = 0.9 * self._lines_per_message + 0.1 * per_message \
                    if self._lines_per_message else per_message
            messages += got
            if lines and first_at is None:
                first_at = time.time()
        if not messages:
            self.idle_lag = self.lag()
            return None
        self.idle_lag = None
        return RawBatch(BlobLines(b"\n".join(pieces), lines), dict(self._positions), lag=self.lag(),
                        messages=messages, empty_messages=empty, rejected=refused)

    def _refuse_oversized(self, tp: TopicPartition, chunk, refused: list) -> list:
        """The values of ``chunk`` without the messages over max_message_bytes, which go to ``refused``."""
        values = []
        for record in chunk:
            value = self._value(record)
            if value and len(value) > self._max_message_bytes:
                refused.append((value[:200], rejection(
                    OVERSIZED_MESSAGE, f"{len(value)} bytes at partition {tp.partition} offset "
                    f"{self._offset(record)} (max_message_bytes {self._max_message_bytes})")))
            else:
                values.append(value)
        return values

    def commit(self, positions: Dict[int, int]) -> None:
        """Queued; done by the reading thread on its next call (the consumer is single-threaded)."""
        self._commits.put(dict(positions))

    def _run_commits(self) -> None:
        from kafka.structs import OffsetAndMetadata  # pylint: disable=g-import-not-at-top
        latest = None
        while True:
            try:
                latest = self._commits.get_nowait()
            except queue.Empty:
                break
        if latest is None or not self._kafka.group:
            return
        try:
            self._consumer.commit({TopicPartition(self._kafka.topic, p): OffsetAndMetadata(o, "")
                                   for p, o in latest.items()})
        except Exception as e:  # pylint: disable=broad-except
            log.warning("committing positions to group %s failed (will retry with the next checkpoint): %s",
                        self._kafka.group, e)

    def close(self) -> None:
        self._run_commits()
        self._consumer.close()
