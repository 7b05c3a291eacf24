"""The fast record decoder gives exactly what kafka-python's own decoder gives.

Unit tests build record batches with kafka-python's own builder (keys,
headers, null values, multi-byte varints, offset gaps as after compaction)
and compare offsets and values with kafka-python's DefaultRecordBatch;
the broker tests read the same topics with and without the fast decoder.
"""
import functools
import struct

import pytest
from hypothesis import given, settings, strategies as st
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from easyonline.inputs import KafkaInput, fast_records
from easyonline.inputs.fast_records import CorruptRecordException
from easyonline.protos import pipeline_pb2


def _batch(records, base_offset=100):
    """A v2 batch from (offset_delta, timestamp, key, value, headers) tuples, as bytes."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for delta, timestamp, key, value, headers in records:
        builder.append(delta, timestamp=timestamp, key=key, value=value, headers=headers)
    data = bytes(builder.build())
    return data[:0] + struct.pack(">q", base_offset) + data[8:]


def _stock(data):
    return [(r.offset, r.value or b"") for r in DefaultRecordBatch(data)]


DECODERS = {"compiled": fast_records.decode_batch,
            "python": functools.partial(fast_records.decode_batch, compiled=False)}
BOTH = pytest.mark.parametrize("decoder", sorted(DECODERS))


def _fast(data, decoder="compiled"):
    batch = DefaultRecordBatch(data)
    records = DECODERS[decoder](data, batch.base_offset, batch._num_records,  # pylint: disable=protected-access
                                batch.last_offset_delta)
    assert all(type(r) is fast_records.FastRecord for r in records)  # pylint: disable=unidiomatic-typecheck
    return [(r.offset, r.value) for r in records]


BROKER = "apache_kafka"  # the decoder reads Apache Kafka's own fetch responses (tests/conftest.py)

def test_the_compiled_decoder_is_built():
    """setup.py builds it (tools/setup_env.sh installs with a C compiler); "compiled" below tests it."""
    assert fast_records._record_decoder is not None  # pylint: disable=protected-access


_record = st.tuples(
    st.integers(0, 2**40),  # timestamp: multi-byte varint deltas
    st.one_of(st.none(), st.binary(max_size=300)),  # key
    st.one_of(st.none(), st.binary(max_size=20000)),  # value: up to 3-byte lengths; None is a tombstone
    st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=50))), max_size=3),
    st.integers(1, 3),  # gap before the next offset (1: none)
)


@BOTH
@settings(max_examples=150, deadline=None)
@given(records=st.lists(_record, min_size=1, max_size=40), gapless=st.booleans())
def test_decode_batch_equals_kafka_python(decoder, records, gapless):
    built, delta = [], 0
    for timestamp, key, value, headers, gap in records:
        built.append((delta, timestamp, key, value, headers))
        delta += 1 if gapless else gap
    data = _batch(built)
    assert _fast(data, decoder) == _stock(data)


@BOTH
def test_gapless_batches_use_consecutive_offsets_and_gaps_keep_theirs(decoder):
    plain = _batch([(i, 1000 + i, None, b"v%d" % i, []) for i in range(300)])
    assert _fast(plain, decoder) == [(100 + i, b"v%d" % i) for i in range(300)]
    compacted = _batch([(d, 1000, None, b"x", []) for d in (0, 2, 3, 9)])
    assert [o for o, _ in _fast(compacted, decoder)] == [100, 102, 103, 109]


@BOTH
@pytest.mark.parametrize("damage", ["truncated", "length", "trailing", "key", "value", "header"])
def test_damaged_batches_raise_instead_of_returning_garbage(decoder, damage):
    data = bytearray(_batch([(i, 1000, None, b"value-%d" % i, []) for i in range(5)]))
    header = DefaultRecordBatch.HEADER_STRUCT.size
    # first record: length, attributes, timestamp delta, offset delta, key length, value length, value, headers
    if damage == "truncated":
        data = data[:-7]
    elif damage == "length":
        data[header] += 6  # the first record claims 3 more bytes than it has
    elif damage == "key":
        data[header + 4] = 0x7e  # a 63-byte key in a 12-byte record
    elif damage == "value":
        data[header + 5] = 0x7e  # a 63-byte value
    elif damage == "header":
        data[header + 13] = 0x02  # one header, whose bytes would be the next record's
    else:
        data += b"\x00\x00"
    batch = DefaultRecordBatch(bytes(data))
    with pytest.raises(CorruptRecordException):
        DECODERS[decoder](bytes(data), batch.base_offset, batch._num_records,  # pylint: disable=protected-access
                          batch.last_offset_delta)


def _read_all(consumer, tp, expected):
    got = []
    while len(got) < expected:
        for records in consumer.poll(timeout_ms=1000).values():
            got.extend((r.offset, r.value) for r in records)
    return got


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("compression", [None, "gzip"])
def test_consumer_with_fast_decoder_reads_what_the_stock_consumer_reads(broker, topic, compression, compiled):
    """Keys, headers, tombstones and empty values; gzip batches go through kafka-python's decoder.

    ``compiled=False`` runs the Python fallback (as where no C compiler built the decoder).
    """
    broker.create_topic(topic, 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20, compression_type=compression)
    for i in range(500):
        value = None if i % 97 == 5 else (b"" if i % 50 == 7 else b"line-%d," % i * (i % 40))
        producer.send(topic, value, key=b"k%d" % i if i % 3 == 0 or value is None else None,
                      headers=[("h", b"%d" % i)] if i % 5 == 0 else None, partition=0)
    producer.flush()
    producer.close()
    tp = TopicPartition(topic, 0)
    results = []
    for fast in (False, True):
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, auto_offset_reset="earliest")
        assert not fast or fast_records.install(consumer, compiled=compiled)
        consumer.assign([tp])
        consumer.seek(tp, 123)  # in the middle of a batch: earlier records of that batch are skipped
        results.append([(o, v or b"") for o, v in _read_all(consumer, tp, 500 - 123)])
        consumer.close()
    assert results[1] == results[0]
    assert [o for o, _ in results[1]] == list(range(123, 500))


def test_kafka_input_positions_and_lines_with_the_fast_decoder(broker, topic):
    """Several lines per message, empty messages and a start inside a batch, on two partitions."""
    broker.create_topic(topic, 2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20)
    for p in range(2):
        for i in range(300):
            value = b"" if i % 100 == 42 else b"\n".join(b"p%d_%d_%d" % (p, i, j) for j in range(1 + i % 3))
            producer.send(topic, value, partition=p)
    producer.flush()
    producer.close()
    source = KafkaInput(pipeline_pb2.KafkaInput(server=broker.bootstrap, topic=topic, offset_info='{"0": 10, "1": 150}'),
                        batch_size=64, batch_timeout_ms=200)
    expected = [b"p%d_%d_%d" % (p, i, j) for p, start in ((0, 10), (1, 150)) for i in range(start, 300)
                if i % 100 != 42 for j in range(1 + i % 3)]
    lines, empty, last = [], 0, None
    while True:  # up to 30 s a batch until every line came (a first fetch includes connecting), then 1 s
        batch = source.next_batch(30.0 if len(lines) < len(expected) else 1.0)
        if batch is None:
            break
        lines.extend(batch.lines)
        empty += batch.empty_messages
        last = batch
    source.close()
    assert sorted(lines) == sorted(expected)
    assert empty == 3 + 1  # offsets 42, 142, 242 of partition 0; 242 of partition 1
    assert last.positions == {0: 300, 1: 300}


def test_another_kafka_python_falls_back_to_its_own_decoder_and_says_so_once(broker, topic, caplog, monkeypatch):
    """A kafka-python whose fetcher has neither hook (2.0's _unpack_message_set, 3.0's PartitionRecords): a warning,
    not a silent slow path."""
    import logging  # pylint: disable=g-import-not-at-top
    from kafka.consumer.fetcher import Fetcher  # pylint: disable=g-import-not-at-top
    monkeypatch.delattr(Fetcher, "_unpack_message_set", raising=False)  # kafka-python 2.0's hook
    monkeypatch.delattr(Fetcher, "PartitionRecords", raising=False)  # 3.0's
    monkeypatch.setattr(fast_records, "_warned", [])
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        with caplog.at_level(logging.WARNING, logger="easyonline.inputs.fast_records"):
            assert fast_records.install(consumer) is False
            assert fast_records.install(consumer) is False
    finally:
        consumer.close()
    warnings = [r.getMessage() for r in caplog.records if "fast path replaces" in r.getMessage()]
    assert len(warnings) == 1 and "requirements.txt" in warnings[0]


def _read_backlog(bootstrap: str, topic: str, records: int):
    """Seconds to read ``records`` through the kafka-python fast path in 64 KB fetches, and the last positions."""
    import time  # pylint: disable=g-import-not-at-top
    kafka = pipeline_pb2.KafkaInput(server=bootstrap, topic=topic, client=pipeline_pb2.KafkaInput.KAFKA_PYTHON)
    kafka.config["max_partition_fetch_bytes"] = str(64 * 1024)
    source = KafkaInput(kafka, batch_size=64, batch_timeout_ms=500)  # a fetch of partition 1 lasts several batches
    read, started = 0, time.perf_counter()
    try:
        while read < records:
            batch = source.next_batch(5.0)
            assert batch is not None, read
            read += len(batch.lines)
        seconds = time.perf_counter() - started
    finally:
        source.close()
    assert read == records
    return seconds, batch.positions


def test_a_partition_at_its_end_does_not_stall_the_backlog_of_another(broker, topic):
    """Partition 0 holds a few records, partition 1 a backlog read in many small fetches. Once partition 0
    is at its end, kafka-python 3.0 alone sends fetches made only of it whenever partition 1's records are
    still buffered; the broker holds such a fetch fetch_max_wait_ms (100 ms here), and partition 1 waits
    behind it: 5.5 s here for ~100 fetch cycles of 64 KB, against 0.7 s without such fetches. The bound is
    relative: three times the read of the same backlog alone on a one-partition topic, measured in the same
    test (0.7 s here; 5.5 s for the stalled read), so a slower machine slows both."""
    broker.create_topic(topic, 2)
    broker.create_topic(topic + "_alone", 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20, batch_size=64 * 1024)
    for i in range(20):
        producer.send(topic, b"p0_%d" % i, partition=0)
    line = b"x" * 200
    for i in range(30000):
        producer.send(topic, line, partition=1)
        producer.send(topic + "_alone", line, partition=0)
    producer.flush()
    producer.close()
    alone, _ = _read_backlog(broker.bootstrap, topic + "_alone", 30000)
    seconds, positions = _read_backlog(broker.bootstrap, topic, 30020)
    assert positions == {0: 20, 1: 30000}
    # (a stall is a fetch wait of 0.5 s per poll, seconds in all; 3x + 0.3 s failed once at 2.3 s on a busy machine)
    assert seconds < 5 * alone + 1.0, (f"{seconds:.1f} s to read 30,020 records against {alone:.1f} s for the "
                                       "backlog alone: fetches of partitions at their end stalled it")
