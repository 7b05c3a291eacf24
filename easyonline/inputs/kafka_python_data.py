"""kafka-python as the data consumer (``client: KAFKA_PYTHON``): the running reader's calls beyond poll.

KafkaInput asks its data consumer, whichever client it is, for the same
few things while reading: each partition's position (which moves past
commit markers and aborted batches, so it is not "the last record's offset
+ 1"), where readable data ends (read_bounds.py), a partition's range when
the broker reports a position out of range, the topic's partitions now, and
to add partitions. ConfluentDataConsumer answers them for librdkafka; this
wrapper for kafka-python, passing every other call through.

The consumer is made with ``auto_offset_reset="none"``: a position out of
range raises ``OffsetOutOfRangeError`` from ``poll`` (kafka-python's other
settings would reset it silently), and KafkaInput decides, as at start.
"""
import logging
from typing import Dict, List, Optional, Tuple

from kafka import KafkaConsumer, TopicPartition
from kafka import errors as kafka_errors

from easyonline.inputs.read_bounds import KafkaPythonBounds
from easyonline.utils import kafka_access

log = logging.getLogger(__name__)


class KafkaPythonDataConsumer:
    """A KafkaConsumer (assign/seek/poll/highwater/commit/close pass through) plus the reader's calls."""

    def __init__(self, consumer: KafkaConsumer, topic: str, committed: bool):
        self._consumer = consumer
        self._topic = topic
        self._bounds = KafkaPythonBounds(consumer, committed)

    def __getattr__(self, name):  # assign, seek, poll, highwater, commit, close, beginning_offsets, ...
        return getattr(self._consumer, name)

    def poll(self, timeout_ms: int = 0, max_records: Optional[int] = None):
        """kafka-python's poll; a topic an ACL does not let this principal READ is a KafkaAccessError."""
        try:
            return self._consumer.poll(timeout_ms=timeout_ms, max_records=max_records)
        except kafka_errors.TopicAuthorizationFailedError:
            raise kafka_access.denied(self._consumer.config, "READ", "topic", self._topic,
                                      "kafka_train_input.topic") from None

    def commit(self, offsets) -> None:
        """Commits to the consumer group; a group an ACL does not let this principal READ is a
        KafkaAccessError (committing to a group is its READ operation)."""
        try:
            self._consumer.commit(offsets)
        except kafka_errors.GroupAuthorizationFailedError:
            raise kafka_access.denied(self._consumer.config, "READ", "group", self._consumer.config["group_id"],
                                      "kafka_train_input.group") from None

    def positions(self, tps: List[TopicPartition]) -> Dict[int, int]:
        """{partition: the offset after everything poll handed out} (the fetcher's own position, which
        skipped markers and aborted batches); partitions without one yet are left out.

        Read from the subscription state: ``KafkaConsumer.position`` may refresh committed offsets over the
        network, too slow for every poll.
        """
        out = {}
        assignment = getattr(getattr(self._consumer, "_subscription", None), "assignment", None)
        for tp in tps:
            state = assignment.get(tp) if assignment is not None else None
            position = getattr(state, "position", None) if state is not None else None
            offset = getattr(position, "offset", position)
            if isinstance(offset, int) and offset >= 0:
                out[tp.partition] = offset
        return out

    def end(self, tp: TopicPartition) -> Optional[int]:
        """Where this reader's readable data ends (read_bounds.py); None before a fetch (or unassigned)."""
        if tp not in self._consumer.assignment():
            return None
        return self._bounds.end(tp)

    def log_range(self, tp: TopicPartition) -> Tuple[int, int]:
        """(log start, end) of ``tp`` asked of the broker now; the end is at least the last fetch's (some
        brokers' ListOffsets undercount it)."""
        begin = self._consumer.beginning_offsets([tp])[tp]
        end = self._consumer.end_offsets([tp])[tp]
        return begin, max(end, self.end(tp) or 0)

    def topic_partitions(self) -> Optional[List[int]]:
        """The topic's partitions as the brokers tell now (None when they did not answer)."""
        try:
            self._consumer.topics()  # a metadata request; partitions_for_topic answers from its cache
            partitions = self._consumer.partitions_for_topic(self._topic)
        except Exception as e:  # pylint: disable=broad-except
            log.warning("kafka-python: could not refresh the partitions of %s: %s", self._topic, e)
            return None
        return sorted(partitions) if partitions else None

    def add_partitions(self, offsets: Dict[TopicPartition, int], positions: Dict[TopicPartition, int]) -> None:
        """Starts reading partitions not assigned before, each from its offset; the others go on from
        ``positions`` (assign replaces the assignment)."""
        self._consumer.assign(list(positions) + list(offsets))
        for tp, offset in {**positions, **offsets}.items():
            self._consumer.seek(tp, offset)
