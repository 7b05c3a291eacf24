"""The data consumer on confluent-kafka (librdkafka), behind the calls KafkaInput makes of kafka-python's.

``kafka_train_input.client: CONFLUENT_KAFKA`` reads samples with librdkafka,
EasyRec's data client and a maintained one, which reads with less CPU per
sample than kafka-python (tools/bench/kafka_clients.py). Only the reading
is librdkafka's: finding the partitions and the start positions stays with
kafka-python (the control path, as EasyRec splits it too). This class
answers the few calls KafkaInput makes on its data consumer (assign, seek,
poll, highwater, commit, close) with kafka-python's types, so the rest of
the input path does not know which client reads; only the records poll
returns are librdkafka's own, read through ``record_value`` and
``record_offset``. It also answers the calls of the running reader that
kafka-python's data consumer answers in kafka_python_data.py: positions,
where readable data ends (read_bounds.py), a partition's range, the topic's
partitions now, and adding partitions.

``isolation.level`` follows the section (read_committed by default):
librdkafka then skips aborted batches itself, from the aborted-transactions
list of each fetch response, and moves its position past commit markers.
``auto.offset.reset`` is "error": a position the broker reports out of range
while running raises ``OffsetOutOfRangeError`` here (librdkafka's default
would jump to the partition's end, silently skipping every unread sample);
KafkaInput decides what happens, as at start.
"""
import itertools
import logging
from typing import Dict, List, Optional

from kafka import TopicPartition
from kafka.errors import KafkaError, OffsetOutOfRangeError

from easyonline.config.kafka_settings import confluent_kafka_module, librdkafka_config
from easyonline.inputs.read_bounds import LibrdkafkaBounds
from easyonline.protos import pipeline_pb2
from easyonline.utils import kafka_access

log = logging.getLogger(__name__)

class ConfluentDataConsumer:
    """Reads assigned partitions from given offsets; kafka-python's poll/highwater/commit shapes."""

    def __init__(self, kafka: pipeline_pb2.KafkaInput, path: str):
        self._ck = confluent_kafka_module(path)
        config = librdkafka_config(kafka, path, f"easyonline-{path}")
        config["logger"] = logging.getLogger("easyonline.inputs.librdkafka")  # not librdkafka's own stderr lines
        config["auto.offset.reset"] = "error"  # never a silent jump: KafkaInput decides (see above)
        self._bounds = LibrdkafkaBounds(kafka.topic, config.get("isolation.level") == "read_committed")
        config["statistics.interval.ms"] = 1000  # the last stable offsets (read_bounds.py)
        config["stats_cb"] = self._bounds.on_stats
        self._topic = kafka.topic
        self._access = (dict(config), kafka.server, f"{path}.config", kafka.group or "easyonline")
        config["error_cb"] = self._on_error  # a refused login or certificate: raised by the next poll
        self._refused: Optional[Exception] = None
        self._consumer = self._ck.Consumer(config)
        self._offsets: Dict[TopicPartition, int] = {}
        self._partitions: Dict[int, TopicPartition] = {}
        self._assigned = False
        self._out_of_range: Optional[Dict[TopicPartition, int]] = None
        self.record_value = self._ck.Message.value  # how KafkaInput reads the messages poll returns
        self.record_offset = self._ck.Message.offset
        self._error, self._partition = self._ck.Message.error, self._ck.Message.partition

    def assign(self, partitions: List[TopicPartition]) -> None:
        self._offsets = {tp: self._ck.OFFSET_BEGINNING for tp in partitions}
        self._assigned = False

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Before the first poll: where ``tp`` starts. While reading: moves ``tp`` alone (also out of the
        error state an out-of-range report leaves it in)."""
        self._offsets[tp] = offset
        if not self._assigned:
            return
        one = self._ck.TopicPartition(tp.topic, tp.partition, offset)
        self._consumer.incremental_unassign([one])
        self._consumer.incremental_assign([one])

    def add_partitions(self, offsets: Dict[TopicPartition, int], positions: Dict[TopicPartition, int]) -> None:
        """Starts reading partitions not assigned before (added to the topic), each from its offset; the
        others read on undisturbed (``positions``, where they stand, is kafka-python's concern)."""
        del positions
        self._offsets.update(offsets)
        if self._assigned:
            self._consumer.incremental_assign([self._ck.TopicPartition(tp.topic, tp.partition, offset)
                                               for tp, offset in offsets.items()])

    def positions(self, tps: List[TopicPartition]) -> Dict[int, int]:
        """{partition: the offset after everything poll handed out, markers and aborted batches included};
        partitions librdkafka has no position for yet are left out."""
        if not self._assigned:
            return {}
        return {tp.partition: tp.offset
                for tp in self._consumer.position([self._ck.TopicPartition(t.topic, t.partition) for t in tps])
                if tp.offset >= 0}

    def end(self, tp: TopicPartition) -> Optional[int]:
        """Where this reader's readable data ends (read_bounds.py); None before a fetch."""
        return self._bounds.end(tp.partition, self.highwater(tp))

    def log_range(self, tp: TopicPartition) -> tuple:
        """(log start, end) of ``tp`` asked of the broker now; the end is at least the last fetch's."""
        low, high = self._consumer.get_watermark_offsets(self._ck.TopicPartition(tp.topic, tp.partition),
                                                         timeout=10, cached=False)
        return low, max(high, self.highwater(tp) or 0)

    def topic_partitions(self) -> Optional[List[int]]:
        """The topic's partitions as the brokers tell now (None when they did not answer)."""
        try:
            topic = self._consumer.list_topics(self._topic, timeout=10).topics.get(self._topic)
        except self._ck.KafkaException as e:
            log.warning("librdkafka: could not refresh the partitions of %s: %s", self._topic, e)
            return None
        if topic is None or topic.error is not None:
            return None
        return sorted(topic.partitions)

    def _assign(self) -> None:
        self._consumer.assign([self._ck.TopicPartition(tp.topic, tp.partition, offset)
                               for tp, offset in self._offsets.items()])
        self._assigned = True

    def poll(self, timeout_ms: int, max_records: int) -> Dict[TopicPartition, list]:
        """{partition: librdkafka's messages}, read with ``record_value`` / ``record_offset``.

        The messages are handed on as they are (a Record per message and a TopicPartition per message
        were ~1 us of the reader's CPU per sample).
        """
        if not self._assigned:
            self._assign()
        if self._refused is not None:
            raise self._refused
        if self._out_of_range:
            out_of_range, self._out_of_range = self._out_of_range, None
            raise OffsetOutOfRangeError(out_of_range)
        out: Dict[TopicPartition, list] = {}
        # As kafka-python's poll: back as soon as something arrived (librdkafka's consume would wait for all
        # max_records or the timeout), with whatever else is already fetched.
        first = self._consumer.poll(timeout_ms / 1000.0)
        if first is None:
            return out
        messages = [first] + (self._consumer.consume(num_messages=max_records - 1, timeout=0) if max_records > 1 else [])
        # Per message only C-level calls (map, count, compress), no Python loop.
        if any(map(self._error, messages)):
            messages = self._without_errors(messages)
        partitions = list(map(self._partition, messages))
        if not partitions:
            return out
        if partitions.count(partitions[0]) == len(partitions):  # the usual case: one partition's run
            out[self._topic_partition(messages[0])] = messages
            return out
        for partition in sorted(set(partitions)):
            chunk = list(itertools.compress(messages, map(partition.__eq__, partitions)))
            out[self._topic_partition(chunk[0])] = chunk
        return out

    def _topic_partition(self, message) -> TopicPartition:
        tp = self._partitions.get(message.partition())
        if tp is None:
            tp = self._partitions[message.partition()] = TopicPartition(message.topic(), message.partition())
        return tp

    def _without_errors(self, messages: list) -> list:
        kept = []
        out_of_range = {}
        for message in messages:
            if message.error() is None:
                kept.append(message)
            elif message.error().code() == self._ck.KafkaError._AUTO_OFFSET_RESET:  # pylint: disable=protected-access
                tp = TopicPartition(message.topic() or self._topic, message.partition())
                out_of_range[tp] = message.offset() if message.offset() is not None and message.offset() >= 0 \
                    else self._offsets.get(tp, -1)
            else:
                self._raise_or_log(message.error())
        if out_of_range and not kept:  # kafka-python's shape
            raise OffsetOutOfRangeError(out_of_range)
        self._out_of_range = out_of_range or None  # raised by the next poll, once ``kept`` was handed out
        return kept

    def _refusal(self, error) -> Optional[Exception]:
        settings, server, where, group = self._access
        return kafka_access.librdkafka_refusal(error, settings, server, where, self._topic, group)

    def _on_error(self, error) -> None:
        """librdkafka's client-level errors (a failed login, an untrusted certificate) come here, not on
        messages: kept for the next poll to raise (librdkafka itself would retry for ever)."""
        if self._refused is None:
            self._refused = self._refusal(error)

    def _raise_or_log(self, error) -> None:
        if error.code() == self._ck.KafkaError._PARTITION_EOF:  # pylint: disable=protected-access
            return
        refused = self._refusal(error)
        if refused is not None:
            raise refused
        if error.fatal():
            raise KafkaError(f"librdkafka: {error.str()}")
        log.warning("librdkafka: %s (retrying)", error.str())

    def highwater(self, tp: TopicPartition) -> Optional[int]:
        """The partition's end offset as of the last fetch (None before one)."""
        try:
            _, high = self._consumer.get_watermark_offsets(self._ck.TopicPartition(tp.topic, tp.partition),
                                                           cached=True)
        except self._ck.KafkaException:
            return None
        return high if high is not None and high >= 0 else None

    def commit(self, offsets: Dict[TopicPartition, object]) -> None:
        try:
            self._consumer.commit(offsets=[self._ck.TopicPartition(tp.topic, tp.partition, meta.offset)  # type: ignore
                                           for tp, meta in offsets.items()], asynchronous=False)
        except self._ck.KafkaException as e:
            refused = self._refusal(e.args[0]) if e.args else None
            if refused is not None:
                raise refused from None
            raise

    def close(self) -> None:
        self._consumer.close()
