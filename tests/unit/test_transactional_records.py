"""The fast record decoder on read_committed fetches: aborted transactions and markers, as Kafka's consumer.

A real Kafka keeps aborted batches in the log and lists the aborted
transactions in each fetch response; a read_committed reader skips them
and the commit/abort markers (control batches). The local broker cannot
produce such a response (it drops aborted batches it still buffers, and
lists no aborted transactions), so these tests build the fetch response
themselves: record batches from kafka-python's own builder (transactional,
lz4-compressed and plain), control batches (the builder makes none: a
one-record transactional batch with the control key, its control bit set
and its CRC recomputed, byte for byte what a broker writes), and an
aborted-transactions list. The same response goes through kafka-python
3.0's own ``PartitionRecords`` (the reference) and easyonline's fast one.
"""
import struct

import pytest
from kafka.consumer.fetcher import Fetcher
from kafka.protocol.consumer.offsets import IsolationLevel
from kafka.protocol.old.fetch import AbortedTransaction
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c
from kafka.structs import TopicPartition

from easyonline.inputs import fast_records

TP = TopicPartition("t", 0)
PLAIN, TXN_A, TXN_B = -1, 7, 9  # producer ids: none (not transactional), two transactional producers
LZ4 = DefaultRecordBatch.CODEC_LZ4


def _batch(base_offset, values, producer_id=PLAIN, codec=0):
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=producer_id != PLAIN,
                                        producer_id=producer_id, producer_epoch=0 if producer_id != PLAIN else -1,
                                        base_sequence=0 if producer_id != PLAIN else -1, batch_size=1 << 30)
    for delta, value in enumerate(values):
        builder.append(delta, timestamp=1000, key=None, value=value, headers=[])
    data = bytearray(builder.build())
    data[0:8] = struct.pack(">q", base_offset)
    return bytes(data)


def _marker(offset, producer_id, commit):
    """A control batch: one record, key (version 0, type 1 commit / 0 abort), as a broker writes it."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True,
                                        producer_id=producer_id, producer_epoch=0, base_sequence=-1,
                                        batch_size=1 << 30)
    builder.append(0, timestamp=1000, key=struct.pack(">hh", 0, 1 if commit else 0), value=b"\0\0\0\0\0\0",
                   headers=[])
    data = bytearray(builder.build())
    data[0:8] = struct.pack(">q", offset)
    attributes_at = 21  # base offset 8, length 4, leader epoch 4, magic 1, crc 4
    attributes = struct.unpack_from(">h", data, attributes_at)[0] | DefaultRecordBatch.CONTROL_MASK
    struct.pack_into(">h", data, attributes_at, attributes)
    struct.pack_into(">I", data, 17, calc_crc32c(bytes(data[attributes_at:])))
    return bytes(data)


def _log():
    """One partition's log as a real Kafka keeps it: A commits, B aborts (interleaved with A), plain
    records between, A's second transaction (lz4) commits; a marker for each transaction."""
    return b"".join([
        _batch(0, [b"plain0", b"plain1"]),
        _batch(2, [b"a0", b"a1"], TXN_A),
        _batch(4, [b"b0", b"b1"], TXN_B),                 # aborted
        _batch(6, [b"a2"], TXN_A),
        _marker(7, TXN_A, commit=True),
        _batch(8, [b"b2", b"b3"], TXN_B, codec=LZ4),      # aborted, compressed
        _marker(10, TXN_B, commit=False),
        _batch(11, [b"plain2"]),
        _batch(12, [b"a3", b"a4", b"a5"], TXN_A, codec=LZ4),
        _marker(15, TXN_A, commit=True),
    ]), [AbortedTransaction(producer_id=TXN_B, first_offset=4)]


COMMITTED = [b"plain0", b"plain1", b"a0", b"a1", b"a2", b"plain2", b"a3", b"a4", b"a5"]


def _take(records_class, fetch_offset, isolation, data, aborted, step=None):
    part = records_class(fetch_offset, TP, MemoryRecords(data), isolation_level=isolation,
                         aborted_transactions=aborted)
    out = []
    while part:
        got = part.take(step)
        if not got:
            break
        out.extend(got)
    if part:  # nothing left to hand out, but not drained: one more take moves past trailing markers
        part.take(step)
    return out, part.next_fetch_offset


def _fast_class():
    return fast_records._fast_partition_records(compiled=True)  # pylint: disable=protected-access


@pytest.mark.parametrize("step", [None, 1, 4])
def test_read_committed_skips_aborted_batches_and_markers_as_kafka_python_does(step):
    data, aborted = _log()
    reference, reference_next = _take(Fetcher.PartitionRecords, 0, IsolationLevel.READ_COMMITTED, data, aborted)
    fast, fast_next = _take(_fast_class(), 0, IsolationLevel.READ_COMMITTED, data, aborted, step)
    assert [r.value for r in reference] == COMMITTED
    assert [(r.offset, r.value) for r in fast] == [(r.offset, r.value) for r in reference]
    # the fast path decoded them (before, read_committed fell back to kafka-python's ~12 us per record)
    assert all(type(r) is fast_records.FastRecord for r in fast)  # pylint: disable=unidiomatic-typecheck
    assert fast_next == reference_next == 16  # past the last commit marker: the reader is at its end


def test_a_fetch_that_starts_inside_the_log_and_uncommitted_reads():
    data, aborted = _log()
    fast, _ = _take(_fast_class(), 9, IsolationLevel.READ_COMMITTED, data, aborted)
    assert [r.value for r in fast] == [b"plain2", b"a3", b"a4", b"a5"]  # b3 at 9 is aborted
    assert all(type(r) is fast_records.FastRecord for r in fast)  # pylint: disable=unidiomatic-typecheck
    only_marker, next_offset = _take(_fast_class(), 7, IsolationLevel.READ_COMMITTED,
                                     _marker(7, TXN_A, commit=True), [])
    assert only_marker == [] and next_offset == 8  # a fetch of only a marker moves the position past it
    uncommitted, next_offset = _take(_fast_class(), 0, IsolationLevel.READ_UNCOMMITTED, data, aborted)
    assert [r.value for r in uncommitted] == [b"plain0", b"plain1", b"a0", b"a1", b"b0", b"b1", b"a2", b"b2",
                                              b"b3", b"plain2", b"a3", b"a4", b"a5"]  # markers never
    assert next_offset == 16

