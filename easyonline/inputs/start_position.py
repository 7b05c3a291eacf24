"""Where reading starts in each partition: checkpoint, offsets, a time, or earliest.

A timestamp start asks the broker (``offsets_for_times``) and then checks the
answer against the records' own timestamps, searching by offset when the
answer is wrong (the local broker answers 0 for any time). On a real Kafka
the answer is right and the check costs two single-record reads.
"""
import logging
from typing import Dict, Optional, Tuple

from kafka import KafkaConsumer, TopicPartition

from easyonline.config.validate import parse_offset_info
from easyonline.protos import pipeline_pb2
from easyonline.utils import timeparse

log = logging.getLogger(__name__)


def start_time_seconds(kafka: pipeline_pb2.KafkaInput) -> Optional[float]:
    if kafka.offset_time:
        return timeparse.parse_offset_time(kafka.offset_time)
    if kafka.offset_info:
        kind, value = parse_offset_info(kafka.offset_info, "offset_info")
        if kind == "timestamp":
            return value
    return None


class RecordProbe:
    """Reads single records by offset with a private consumer (no group)."""

    def __init__(self, consumer: KafkaConsumer, tp: TopicPartition, poll_timeout: float = 3.0):
        self._consumer = consumer
        self._tp = tp
        self._timeout_ms = int(poll_timeout * 1000)
        consumer.assign([tp])
        self.highwater: Optional[int] = None

    def record_at_or_after(self, offset: int) -> Optional[Tuple[int, int]]:
        """(offset, timestamp ms) of the first record at or after ``offset``, None past the end."""
        if self.highwater is not None and offset >= self.highwater:
            return None
        self._consumer.seek(self._tp, offset)
        records = self._consumer.poll(timeout_ms=self._timeout_ms, max_records=1).get(self._tp, [])
        self.highwater = self._consumer.highwater(self._tp)
        if not records:
            return None
        return records[0].offset, records[0].timestamp


def offset_for_time(probe: RecordProbe, begin: int, target_ms: int, hint: Optional[int]) -> int:
    """The offset of the first record with timestamp >= target_ms (the end offset if none)."""
    first = probe.record_at_or_after(begin)
    if first is None:
        return begin
    end = probe.highwater if probe.highwater is not None else begin
    if hint is not None and begin <= hint <= end:
        at = probe.record_at_or_after(hint)
        before = probe.record_at_or_after(hint - 1) if hint > begin else None
        if (at is None or at[1] >= target_ms) and (before is None or before[1] < target_ms or before[0] >= hint):
            return hint if at is None or at[0] == hint else at[0]
        log.info("broker's offsets_for_times answer %s for %s is wrong; searching by record timestamps",
                 hint, probe._tp)  # pylint: disable=protected-access
    lo, hi = begin, end
    while lo < hi:
        mid = (lo + hi) // 2
        record = probe.record_at_or_after(mid)
        if record is None or record[1] >= target_ms:
            hi = mid
        else:
            lo = record[0] + 1
    return lo


def resolve_start_offsets(consumer: KafkaConsumer, probe_consumer: KafkaConsumer,
                          partitions: Tuple[TopicPartition, ...], kafka: pipeline_pb2.KafkaInput,
                          checkpoint_positions: Optional[Dict[int, int]] = None) -> Tuple[Dict[int, int], str]:
    """Returns ({partition: offset}, mode). Checkpoint positions win over the config."""
    begin = consumer.beginning_offsets(list(partitions))
    earliest = {tp.partition: begin[tp] for tp in partitions}
    if checkpoint_positions:
        return {p: max(checkpoint_positions.get(p, earliest[p]), earliest[p]) for p in earliest}, "checkpoint"
    if kafka.offset_info:
        kind, value = parse_offset_info(kafka.offset_info, "offset_info")
        if kind == "offsets":
            return {p: max(value.get(p, earliest[p]), earliest[p]) for p in earliest}, "offset_info"
    seconds = start_time_seconds(kafka)
    if seconds is None:
        return earliest, "earliest"
    target_ms = int(seconds * 1000)
    try:
        hints = consumer.offsets_for_times({tp: target_ms for tp in partitions})
    except Exception as e:  # pylint: disable=broad-except
        log.warning("offsets_for_times failed (%s); searching by record timestamps", e)
        hints = {}
    offsets = {}
    for tp in partitions:
        hint = hints.get(tp)
        probe = RecordProbe(probe_consumer, tp)
        offsets[tp.partition] = offset_for_time(probe, begin[tp], target_ms, hint.offset if hint else None)
    return offsets, "timestamp"
