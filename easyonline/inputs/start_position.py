"""Where reading starts in each partition: checkpoint, offsets, a time, or earliest.

A timestamp start asks the broker (``offsets_for_times``) and then checks the
answer against the records' own timestamps, searching by offset when the
answer is wrong (the local broker answers 0 for any time). On a real Kafka
the answer is right and the check costs two single-record reads.
"""
import logging
from typing import Dict, List, Optional, Sequence, Tuple

from kafka import KafkaConsumer, TopicPartition

from easyonline.config.offset_info import parse_offset_info
from easyonline.core.errors import ConfigError
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


def usable_checkpoint_positions(positions: Optional[Dict[int, int]], saved_topic: str,
                                kafka: pipeline_pb2.KafkaInput,
                                topic_partitions: Optional[Sequence[int]] = None, saved_topic_id: str = "",
                                topic_id: str = "") -> Optional[Dict[int, int]]:
    """The checkpoint's positions if they are for this stream, else what ``on_topic_change`` says.

    They are for another stream when they name another topic (``saved_topic``;
    "" in checkpoints from before topics were saved), when the topic's Kafka
    id (``topic_id``) is not the one saved with them (``saved_topic_id``): the
    topic was deleted and created again under the same name; or when they
    name partitions that ``topic_partitions`` (all of the topic's, when
    known) no longer has: partitions are never removed from a topic, so it was
    recreated. A checkpoint without an id (saved before ids were, or by a
    broker that has none) is checked by name and partitions only. FAIL
    raises a ConfigError naming both; START_FROM_CONFIG logs it and returns
    None (start as a first run would).
    """
    if not positions:
        return positions
    reason = ""
    if saved_topic and saved_topic != kafka.topic:
        reason = f"the checkpoint's positions are for topic {saved_topic!r}, the config reads {kafka.topic!r}"
    elif saved_topic_id and topic_id and saved_topic_id != topic_id:
        reason = (f"topic {kafka.topic!r} was deleted and created again: the checkpoint's positions are for its "
                  f"topic id {saved_topic_id}, the topic now has topic id {topic_id}")
    elif topic_partitions is not None and set(positions) - set(topic_partitions):
        reason = (f"the checkpoint's positions name partitions {sorted(positions)} of topic {kafka.topic!r}, "
                  f"which now has partitions {sorted(topic_partitions)} (was it recreated?)")
    if not reason:
        return positions
    if kafka.on_topic_change == pipeline_pb2.KafkaInput.FAIL:
        raise ConfigError("kafka_train_input.topic", f"{reason}; set kafka_train_input.on_topic_change: "
                          "START_FROM_CONFIG to read it as a first run would (the parameters are kept), "
                          "or train into a new model_dir")
    log.warning("%s; reading it as a first run would (kafka_train_input.on_topic_change: START_FROM_CONFIG)",
                reason)
    return None


def _end_offset(probe_consumer: KafkaConsumer, tp: TopicPartition, begin: int, end: int,
                saved: Optional[int]) -> int:
    """The end of ``tp`` (``end``, from ListOffsets); when ``saved`` looks past it, a fetch's high watermark.

    Some brokers' ListOffsets undercount the end where fetches do not (the
    local test broker does when producers batch); the fetch is made only then.
    """
    if saved is None or saved <= end:
        return end
    probe = RecordProbe(probe_consumer, tp)
    probe.record_at_or_after(begin)
    return max(end, probe.highwater or 0)


def out_of_range_decision(kafka: pipeline_pb2.KafkaInput, partition: int, offset: int, begin: int, end: int,
                          whose: str = "the checkpoint's") -> Tuple[int, str]:
    """(where to read ``partition`` from, why it moved or "") for a position ``offset`` given what the
    partition holds, [``begin``, ``end``]: the one decision for a checkpoint at start and for a position
    the broker reports out of range while reading (``whose``: "the reader's").

    Below the log start: the log start (samples were deleted before being
    trained); past the end: the end (the log was truncated). FAIL_OUT_OF_RANGE
    raises a ConfigError naming the partition, the offset and the range.
    """
    moved = min(max(offset, begin), end)
    if moved == offset:
        return offset, ""
    if offset < begin:
        why = f"below its log start {begin}: {begin - offset} samples were deleted before being trained"
    else:
        why = f"past its end {end}: the topic was truncated or recreated, {offset - end} offsets are missing"
    if kafka.on_offset_out_of_range == pipeline_pb2.KafkaInput.FAIL_OUT_OF_RANGE:
        raise ConfigError("kafka_train_input.on_offset_out_of_range",
                          f"topic {kafka.topic!r} partition {partition}: {whose} offset {offset} is {why}; "
                          "set it to RESUME_IN_RANGE to resume at the nearest offset the partition holds")
    return moved, f"partition {partition} moved {offset} -> {moved} ({why})"


def _into_range(saved: Dict[int, int], begin: Dict[int, int], end: Dict[int, int],
                kafka: pipeline_pb2.KafkaInput) -> Tuple[Dict[int, int], List[str]]:
    """Checkpoint offsets moved to what each partition holds, as ``on_offset_out_of_range`` says."""
    offsets, moves = {}, []
    for p in begin:
        offset = saved.get(p)
        if offset is None:  # added to the topic since, or not yet read when the checkpoint was taken
            offsets[p] = begin[p]
            moves.append(f"partition {p} has no position in the checkpoint: from its start {begin[p]}")
            continue
        offsets[p], move = out_of_range_decision(kafka, p, offset, begin[p], end[p])
        if move:
            moves.append(move)
    for move in moves:
        log.warning("resuming topic %s from the checkpoint: %s", kafka.topic, move)
    return offsets, moves


def resolve_start_offsets(consumer: KafkaConsumer, probe_consumer: KafkaConsumer,
                          partitions: Tuple[TopicPartition, ...], kafka: pipeline_pb2.KafkaInput,
                          checkpoint_positions: Optional[Dict[int, int]] = None) -> Tuple[Dict[int, int], str]:
    """Returns ({partition: offset}, how). Checkpoint positions win over the config.

    ``how`` names the start: "checkpoint" (followed by every partition moved
    into range, ``_into_range``), "offset_info", "timestamp" or "earliest".
    """
    begin = consumer.beginning_offsets(list(partitions))
    earliest = {tp.partition: begin[tp] for tp in partitions}
    if checkpoint_positions:
        ends = consumer.end_offsets(list(partitions))
        end = {tp.partition: _end_offset(probe_consumer, tp, begin[tp], ends[tp], checkpoint_positions.get(tp.partition))
               for tp in partitions}
        offsets, moves = _into_range(checkpoint_positions, earliest, end, kafka)
        return offsets, "; ".join(["checkpoint", *moves])
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
