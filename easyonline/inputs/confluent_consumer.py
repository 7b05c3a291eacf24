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
``record_offset``.
"""
import itertools
import logging
from typing import Dict, List, Optional

from kafka import TopicPartition
from kafka.errors import KafkaError

from easyonline.config.kafka_settings import confluent_kafka_module, librdkafka_config
from easyonline.protos import pipeline_pb2

log = logging.getLogger(__name__)

class ConfluentDataConsumer:
    """Reads assigned partitions from given offsets; kafka-python's poll/highwater/commit shapes."""

    def __init__(self, kafka: pipeline_pb2.KafkaInput, path: str):
        self._ck = confluent_kafka_module(path)
        config = librdkafka_config(kafka, path, f"easyonline-{path}")
        config["logger"] = logging.getLogger("easyonline.inputs.librdkafka")  # not librdkafka's own stderr lines
        self._consumer = self._ck.Consumer(config)
        self._offsets: Dict[TopicPartition, int] = {}
        self._partitions: Dict[int, TopicPartition] = {}
        self._assigned = False
        self.record_value = self._ck.Message.value  # how KafkaInput reads the messages poll returns
        self.record_offset = self._ck.Message.offset
        self._error, self._partition = self._ck.Message.error, self._ck.Message.partition

    def assign(self, partitions: List[TopicPartition]) -> None:
        self._offsets = {tp: self._ck.OFFSET_BEGINNING for tp in partitions}
        self._assigned = False

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._offsets[tp] = offset
        self._assigned = False

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
        for message in messages:
            if message.error() is not None:
                self._raise_or_log(message.error())
            else:
                kept.append(message)
        return kept

    def _raise_or_log(self, error) -> None:
        if error.code() == self._ck.KafkaError._PARTITION_EOF:  # pylint: disable=protected-access
            return
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
        self._consumer.commit(offsets=[self._ck.TopicPartition(tp.topic, tp.partition, meta.offset)  # type: ignore
                                       for tp, meta in offsets.items()], asynchronous=False)

    def close(self) -> None:
        self._consumer.close()
