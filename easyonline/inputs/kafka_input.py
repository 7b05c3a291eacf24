"""Reads CSV samples from every partition of a Kafka topic, in batches with a max wait.

Batches end at message boundaries, so the position after a batch (the next
offset of every partition) is exact and can be saved with a checkpoint. The
position is the client's own, which moves past commit markers and aborted
batches of a transactional topic; lag is measured against where readable
data ends (read_bounds.py), so a reader that read everything has lag 0.

While running it also asks for the topic's partitions every
``partition_refresh_secs`` and reads new ones from their beginning, and
handles a position the broker reports out of range as a restart handles a
checkpoint's (``start_position.out_of_range_decision``), never by a jump.
A topic deleted and created again under its name while reading (its Kafka
topic id changed: seen at the partition refresh, or when the broker reports
the position out of range) is handled as ``on_topic_change`` says (FAIL, or
START_FROM_CONFIG: the new topic read as a first run would), never as a
position out of range, which would move to the new topic's end and skip
every sample in it.
The consumer is not thread-safe: everything, commits included, runs on the
thread that calls ``next_batch`` (the Prefetcher's).
"""
import logging
import operator
import queue
import time
from typing import Any, Dict, List, Optional, Tuple

from kafka import TopicPartition
from kafka import errors as kafka_errors
from kafka.errors import OffsetOutOfRangeError

from easyonline.core.errors import ConfigError, KafkaAccessError
from easyonline.core.rejections import OVERSIZED_MESSAGE, rejection
from easyonline.inputs import fast_records, kafka_client
from easyonline.inputs.confluent_consumer import ConfluentDataConsumer
from easyonline.inputs.kafka_python_data import KafkaPythonDataConsumer
from easyonline.inputs.raw_batch import BatchSource, BlobLines, RawBatch
from easyonline.inputs.start_position import (out_of_range_decision, resolve_start_offsets,
                                              usable_checkpoint_positions)
from easyonline.protos import pipeline_pb2
from easyonline.utils.kafka_ids import kafka_uuid_text

log = logging.getLogger(__name__)
_value = operator.attrgetter("value")  # of kafka-python's records
_offset = operator.attrgetter("offset")
_partition_of = operator.attrgetter("partition")
# kafka-python 3's report that a partition's log no longer holds what its leader epoch says the reader read
# (KIP-320): an unclean leader election, or the topic deleted and created again under the reader
_LogTruncation = getattr(kafka_errors, "LogTruncationError", OffsetOutOfRangeError)


class KafkaInput(BatchSource):
    """A batch source over one topic; see ``resolve_start_offsets`` for where it starts."""

    def __init__(self, kafka: pipeline_pb2.KafkaInput, batch_size: int, batch_timeout_ms: int,
                 checkpoint_positions: Optional[Dict[int, int]] = None, path: str = "kafka_train_input",
                 partition_wait_secs: float = 30.0, max_message_bytes: int = 0, compiled_decoder: bool = True,
                 partition_share: Optional[Tuple[int, int]] = None, checkpoint_topic: str = "",
                 checkpoint_topic_id: str = ""):
        self._kafka = kafka
        self._max_message_bytes = max_message_bytes
        self._batch_size = batch_size
        self._batch_timeout = batch_timeout_ms / 1000.0
        self._consumer: Any = kafka_client.make_consumer(kafka, path, max_poll_records=max(batch_size, 500),
                                                    fetch_max_wait_ms=min(100, max(batch_timeout_ms, 1)),
                                                    auto_offset_reset="none")  # out of range: raised, decided here
        self._control = self._consumer
        try:  # a start that fails (no topic, no broker, a policy's refusal) leaves no client behind
            # finds partitions, start positions and the topic's id; kafka-python with either client
            self._path = path
            self.partitions = self._discover(path, partition_wait_secs)
            self.topic_id = self._current_topic_id(refresh=False) or ""  # (the metadata _discover just read)
            checkpoint_positions = usable_checkpoint_positions(checkpoint_positions, checkpoint_topic, kafka,
                                                               [tp.partition for tp in self.partitions],
                                                               checkpoint_topic_id, self.topic_id)
            self._share = partition_share
            self.partitions = self._my_share(self.partitions)
            offsets, self.start_mode = self._start_offsets(checkpoint_positions)
            # offsets the start moved over (retention deleted them before they were trained), counted on with
            # those the running reader moves over: nothing lost is silent
            self.offsets_skipped = sum(abs(offsets[p] - o) for p, o in (checkpoint_positions or {}).items()
                                       if p in offsets)
            if kafka.client == pipeline_pb2.KafkaInput.CONFLUENT_KAFKA:
                # the control consumer stays, for the topic's id (librdkafka's metadata has none)
                self._consumer = ConfluentDataConsumer(kafka, path)
                self._value, self._offset = self._consumer.record_value, self._consumer.record_offset
            else:  # kafka-python reads the data too, with the fast record decoder (compiled False: Python's)
                fast_records.install(self._consumer, compiled=compiled_decoder)
                self._consumer = KafkaPythonDataConsumer(self._consumer, kafka.topic,
                                                         kafka_client.isolation_level(kafka) == "read_committed")
                self._value, self._offset = _value, _offset
            self._consumer.assign(list(self.partitions))
            for tp in self.partitions:
                self._consumer.seek(tp, offsets[tp.partition])
            self.start_offsets = dict(offsets)
            self._positions = dict(offsets)
        except BaseException:
            self._close_clients()
            raise
        self._commits: "queue.Queue[Dict[int, int]]" = queue.Queue()
        self._lines_per_message = 0.0  # running estimate, to ask poll() for about one batch of lines
        self._refresh_every = kafka.partition_refresh_secs
        self._next_refresh = time.time() + self._refresh_every
        log.info("reading %s (topic id %s) partitions %s from %s (%s, %s): %s", kafka.topic, self.topic_id or "-",
                 sorted(offsets), kafka.server, self.start_mode,
                 pipeline_pb2.KafkaInput.Client.Name(kafka.client).lower(), offsets)

    def _start_offsets(self, checkpoint_positions: Optional[Dict[int, int]]) -> Tuple[Dict[int, int], str]:
        probe = kafka_client.make_consumer(self._kafka, self._path + ".probe", group_id=None, fetch_max_wait_ms=50)
        try:
            return resolve_start_offsets(self._control, probe, self.partitions, self._kafka, checkpoint_positions)
        finally:
            probe.close()

    def _current_topic_id(self, refresh: bool = True) -> Optional[str]:
        """Kafka's id of the topic (KIP-516) in its text form, as kafka-topics.sh prints it; None when the
        brokers do not know the topic now (deleted) or give no ids."""
        try:
            if refresh:
                self._control.topics()  # a metadata request
            uuid = self._control._cluster.topic_id(self._kafka.topic)  # pylint: disable=protected-access
        except Exception as e:  # pylint: disable=broad-except  (an outage: asked again later)
            log.warning("could not ask for the topic id of %s: %s", self._kafka.topic, e)
            return None
        if uuid is None or not getattr(uuid, "int", 0):
            return None
        return kafka_uuid_text(uuid)

    def _topic_recreated(self, now_id: Optional[str]) -> bool:
        """True when the topic now has another id than the one read so far (deleted and created again): then
        ``on_topic_change`` applies: FAIL raises a ConfigError naming both ids; START_FROM_CONFIG reads the
        new topic from where the config starts a first run (the parameters are kept)."""
        if not now_id or not self.topic_id or now_id == self.topic_id:
            return False
        why = (f"topic {self._kafka.topic!r} was deleted and created again while reading: its topic id was "
               f"{self.topic_id}, it is now {now_id}")
        if self._kafka.on_topic_change == pipeline_pb2.KafkaInput.FAIL:
            raise ConfigError("kafka_train_input.on_topic_change",
                              f"{why}; the positions read so far ({self._positions}) are not offsets of the new "
                              "topic. Set kafka_train_input.on_topic_change: START_FROM_CONFIG to read it as a "
                              "first run would (the parameters are kept), or train into a new model_dir")
        partitions = self._consumer.topic_partitions() or [tp.partition for tp in self.partitions]
        self.partitions = self._my_share(TopicPartition(self._kafka.topic, p) for p in partitions)
        offsets, how = self._start_offsets(None)
        log.warning("%s; reading the new topic as a first run would (kafka_train_input.on_topic_change: "
                    "START_FROM_CONFIG, %s): %s", why, how, offsets)
        if isinstance(self._consumer, ConfluentDataConsumer):  # a new librdkafka client: none of the old
            self._consumer.close()                             # topic's metadata (ids, epochs) is kept
            self._consumer = ConfluentDataConsumer(self._kafka, self._path)
            self._value, self._offset = self._consumer.record_value, self._consumer.record_offset
        self._consumer.assign(list(self.partitions))
        for tp in self.partitions:
            self._consumer.seek(tp, offsets[tp.partition])
        self._positions = dict(offsets)
        self.topic_id = now_id
        return True

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

    def _my_share(self, partitions) -> Tuple[TopicPartition, ...]:
        """The partitions this reader reads: all, or as the i-th of n (``partition_share``) those p % n == i."""
        if self._share is None:
            return tuple(partitions)
        index, count = self._share
        return tuple(tp for tp in partitions if tp.partition % count == index)

    def lag(self) -> Optional[int]:
        """Offsets readable on the broker not yet read: up to the last stable offset when reading committed
        data, else the high watermark, as of the last fetch (None before a fetch of every partition)."""
        total = 0
        for tp in self.partitions:
            end = self._consumer.end(tp)
            if end is None:
                return None
            total += max(end - self._positions[tp.partition], 0)
        return total

    def _refresh_partitions(self) -> None:
        """Reads partitions added to the topic since the last look, from their log start."""
        self._next_refresh = time.time() + self._refresh_every
        if self._topic_recreated(self._current_topic_id()):
            return
        now = self._consumer.topic_partitions()
        if not now:
            return
        known = {tp.partition for tp in self.partitions}
        new = [tp for tp in self._my_share(TopicPartition(self._kafka.topic, p) for p in now)
               if tp.partition not in known]
        if not new:
            return
        starts = {tp: self._consumer.log_range(tp)[0] for tp in new}
        current = {tp: self._positions[tp.partition] for tp in self.partitions}
        self._consumer.add_partitions(starts, current)
        self.partitions = tuple(sorted(self.partitions + tuple(new), key=_partition_of))
        for tp, offset in starts.items():
            self._positions[tp.partition] = offset
        log.warning("topic %s has new partitions %s: reading them from their start %s", self._kafka.topic,
                    [tp.partition for tp in new], {tp.partition: o for tp, o in starts.items()})

    def _out_of_range(self, reported: Dict[TopicPartition, int]) -> None:
        """A position the broker reported out of range while reading: moved as a checkpoint's is at start
        (``out_of_range_decision``: counted in ``offsets_skipped`` and logged), or a ConfigError. First the
        topic's id is checked: a position past the end of a topic created again is ``on_topic_change``'s."""
        now_id = self._current_topic_id()
        if self._topic_recreated(now_id):
            return
        if self.topic_id and not now_id:  # deleted, not (yet) created again: nothing to decide on
            log.warning("reading topic %s: the broker reported the position out of range and the topic is not "
                        "there now (deleted?): waiting", self._kafka.topic)
            time.sleep(1.0)
            return
        for reported_tp, offset in reported.items():
            tp = TopicPartition(reported_tp.topic, reported_tp.partition)
            at = offset if isinstance(offset, int) and offset >= 0 else self._positions[tp.partition]
            begin, end = self._consumer.log_range(tp)
            moved, why = out_of_range_decision(self._kafka, tp.partition, at, begin, end, whose="the reader's")
            if why:
                self.offsets_skipped += abs(moved - at)
                log.warning("reading topic %s: the broker reported the position out of range: %s "
                            "(kafka_train_input.on_offset_out_of_range: RESUME_IN_RANGE)", self._kafka.topic, why)
            else:
                log.warning("reading topic %s: the broker reported partition %d offset %d out of range, but it "
                            "holds [%d, %d] now: reading on from there", self._kafka.topic, tp.partition, at,
                            begin, end)
            self._positions[tp.partition] = moved
            self._consumer.seek(tp, moved)

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
            if self._refresh_every > 0 and now >= self._next_refresh:
                self._refresh_partitions()
            wanted = self._batch_size - lines
            if self._lines_per_message:
                wanted = max(1, int(wanted / self._lines_per_message))
            else:
                wanted = min(wanted, 16)
            if self._refresh_every > 0:  # wake up for the next look at the topic's partitions
                remaining = min(remaining, max(self._next_refresh - time.time(), 0.001))
            try:
                records = self._consumer.poll(timeout_ms=max(int(remaining * 1000), 1), max_records=wanted)
            except OffsetOutOfRangeError as e:
                self._out_of_range(e.args[0] if e.args and isinstance(e.args[0], dict) else {})
                continue
            except _LogTruncation as e:  # decided as a position out of range, from where the reader is
                self._out_of_range({tp: self._positions.get(tp.partition, -1)
                                    for tp in getattr(e, "divergent_offsets", {}) or self.partitions})
                continue
            positions = self._consumer.positions(self.partitions)
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
            for p, offset in positions.items():  # past markers and aborted batches too
                if offset > self._positions[p]:
                    self._positions[p] = offset
            messages += got
            if lines and first_at is None:
                first_at = time.time()
        if not messages:
            self.idle_lag = self.lag()
            return None
        self.idle_lag = None
        return RawBatch(BlobLines(b"\n".join(pieces), lines), dict(self._positions), lag=self.lag(),
                        messages=messages, empty_messages=empty, rejected=refused,
                        offsets_skipped=self.offsets_skipped, topic_id=self.topic_id)

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
        except KafkaAccessError:
            raise  # an ACL refuses the group: retrying cannot help
        except Exception as e:  # pylint: disable=broad-except
            log.warning("committing positions to group %s failed (will retry with the next checkpoint): %s",
                        self._kafka.group, e)

    def close(self) -> None:
        self._run_commits()
        self._close_clients()

    def _close_clients(self) -> None:
        """The data consumer, and the control consumer unless the data consumer wraps it (kafka-python's)."""
        self._consumer.close()
        if self._control is not self._consumer and not isinstance(self._consumer, KafkaPythonDataConsumer):
            self._control.close()
