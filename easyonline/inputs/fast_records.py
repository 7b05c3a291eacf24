"""A faster decoder for the records a training consumer fetches.

kafka-python 2.0.2 decodes every record of a fetch in pure Python through
several layers (a varint call per field, a DefaultRecord, a ConsumerRecord
with key, headers and sizes): about 12 us per record here, CPU that on two
cores comes straight out of the training step. A trainer needs only each
record's offset and value, so for the common batch (record format v2, no
compression, not a control batch) this module walks the records itself and
yields ``(offset, value)`` pairs with attribute access: in compiled code
(``_record_decoder.c``, built by setup.py; ~0.1 us per record) or, where no
C compiler was at hand, in the Python loop below (~3 us).
Any other batch (compressed, legacy format) goes through kafka-python's
own decoder, so nothing is decoded differently.

Reading committed data (kafka-python's ``isolation_level="read_committed"``,
easyonline's default), the batches a fetch returns are filtered as Kafka's
own consumer does (kafka-python 3.0's ``PartitionRecords._unpack_records``):
the response lists the aborted transactions (producer id, first offset);
a transactional batch of a producer whose aborted transaction began at or
before the batch's last offset is skipped, until that producer's abort
marker; control batches (commit and abort markers) are never handed out.
Either way the position moves past what was skipped (the offset after the
fetch's last batch).

``install(consumer)`` swaps the decoder of one consumer; everything else
(fetching, positions, errors, retries) stays kafka-python's.
"""
import collections
import functools
import itertools
import logging
import types
from typing import List, Optional

import kafka
from kafka.consumer.fetcher import Fetcher
from kafka import errors as kafka_errors
from kafka.record.default_records import DefaultRecordBatch

try:
    from easyonline.inputs import _record_decoder
except ImportError:  # setup.py builds it; without a C compiler decode_batch_python does the same, slower
    _record_decoder = None  # type: ignore[assignment]

log = logging.getLogger(__name__)
# kafka-python 2.0 calls it CorruptRecordException, 3.0 CorruptRecordError.
CorruptRecordException = getattr(kafka_errors, "CorruptRecordException", None) or kafka_errors.CorruptRecordError

FastRecord = collections.namedtuple("FastRecord", "offset value")
_HEADER_SIZE = DefaultRecordBatch.HEADER_STRUCT.size
# Batches the fast path leaves to kafka-python: compressed, control (transaction markers).
_SLOW_ATTRIBUTES = DefaultRecordBatch.CODEC_MASK | DefaultRecordBatch.CONTROL_MASK


class _OneBatch:
    """Looks like MemoryRecords holding a single batch, for kafka-python's own decoder."""

    def __init__(self, batch):
        self._batch = batch

    def next_batch(self):
        batch, self._batch = self._batch, None
        return batch


def _raw_varint(buffer, pos):
    """The unsigned varint at pos (before zigzag decoding) and the position after it."""
    raw = shift = 0
    while True:
        b = buffer[pos]
        pos += 1
        raw |= (b & 0x7f) << shift
        if b < 0x80:
            return raw, pos
        shift += 7
        if shift > 63:
            raise CorruptRecordException(f"a varint runs past 10 bytes at byte {pos}")


def _varint(buffer, pos):
    """The zigzag varint at pos and the position after it."""
    raw, pos = _raw_varint(buffer, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def native_available() -> bool:
    """True when the compiled decoder was built (setup.py; needs a C compiler at install time)."""
    return _record_decoder is not None


def decode_batch(buffer, base_offset: int, count: int, last_offset_delta: int, pos: int = _HEADER_SIZE,
                 compiled: bool = True) -> List[FastRecord]:
    """The ``count`` uncompressed v2 records of ``buffer`` (bytes or bytearray) from ``pos``, as FastRecords.

    A null value (tombstone) becomes b"". Raises CorruptRecordException when
    a record's fields do not add up to its length. Uses the compiled decoder
    when it was built and ``compiled`` is True (tests compare the two).
    """
    try:
        if compiled and _record_decoder is not None:
            return _record_decoder.decode_batch(buffer, base_offset, count, last_offset_delta, pos, FastRecord)
        offsets, values = decode_batch_python(bytes(buffer), base_offset, count, last_offset_delta, pos)
    except (ValueError, IndexError) as e:
        raise CorruptRecordException(str(e) or repr(e)) from None
    return list(map(tuple.__new__, itertools.repeat(FastRecord), zip(offsets, values)))


def decode_batch_python(buffer: bytes, base_offset: int, count: int, last_offset_delta: int,
                        pos: int = _HEADER_SIZE):
    """(offsets, values) for ``decode_batch`` in Python: the reference the compiled decoder is tested
    against, and its fallback.

    Record: length, attributes (int8), timestamp delta, offset delta, key
    length, key, value length, value, header count, headers; the varints are
    zigzag-encoded. Where no compiler built the C decoder this loop is the
    hot path, so when the batch's offsets have no gaps (``last_offset_delta
    == count - 1``, deltas strictly increase) the offset deltas are skipped,
    not decoded. A null value (tombstone) becomes b"". Damage raises
    CorruptRecordException, or IndexError where a field runs off the buffer
    (``decode_batch`` turns both into CorruptRecordException).
    """
    gapless = last_offset_delta == count - 1
    values: List[bytes] = []
    append_value = values.append
    offsets: List[int] = []  # (only when not gapless)
    end_of_buffer = len(buffer)
    for _ in range(count):
        length, pos = _varint(buffer, pos)
        end = pos + length
        if length < 0 or end > end_of_buffer:
            raise CorruptRecordException(f"record length {length} at byte {pos} runs past the batch")
        pos += 1  # attributes
        while buffer[pos] & 0x80:  # timestamp delta: not needed
            pos += 1
        pos += 1
        if gapless:
            while buffer[pos] & 0x80:
                pos += 1
            pos += 1
        else:
            offset_delta, pos = _varint(buffer, pos)
            offsets.append(base_offset + offset_delta)
        if buffer[pos] == 1:  # null key, the common case
            pos += 1
        else:
            key_length, pos = _varint(buffer, pos)
            pos += max(key_length, 0)
        value_length, pos = _varint(buffer, pos)
        if value_length >= 0:
            append_value(buffer[pos:pos + value_length])
            pos += value_length
        else:
            append_value(b"")
        if pos == end - 1 and buffer[pos] == 0:  # no headers, the common case
            pos = end
        else:
            headers, pos = _varint(buffer, pos)
            for _ in range(headers):
                size, pos = _varint(buffer, pos)
                pos += size
                size, pos = _varint(buffer, pos)
                pos += max(size, 0)
        if pos != end:
            raise CorruptRecordException(f"a record has {end - pos} bytes unaccounted for")
    if pos != end_of_buffer:
        raise CorruptRecordException(f"{end_of_buffer - pos} bytes after the last of {count} records")
    if gapless:
        return range(base_offset, base_offset + count), values
    return offsets, values


def _unpack_message_set(self, tp, records, compiled: bool = True) -> List:
    """Drop-in for Fetcher._unpack_message_set (its caller makes a list of it) with FastRecords for plain v2
    batches; a list, not a generator: a yield per record costs more than decoding it."""
    unpacked = []
    batch = records.next_batch()
    while batch is not None:
        if not isinstance(batch, DefaultRecordBatch) or batch.attributes & _SLOW_ATTRIBUTES:
            unpacked.extend(Fetcher._unpack_message_set(self, tp, _OneBatch(batch)))
        else:
            base_offset = batch.base_offset
            self._subscriptions.assignment[tp].last_offset_from_message_batch = base_offset + batch.last_offset_delta
            try:
                unpacked.extend(decode_batch(batch._buffer, base_offset,  # pylint: disable=protected-access
                                             batch._num_records, batch.last_offset_delta,  # pylint: disable=protected-access
                                             compiled=compiled))
            except CorruptRecordException as e:
                raise CorruptRecordException(f"{tp}: invalid record batch at offset {base_offset}: {e}") from e
        batch = records.next_batch()
    return unpacked


KNOWN_KAFKA_PYTHON = "2.0 or 3.0"  # the versions whose record decoding this module replaces
_warned: List[bool] = []


def _warn_fallback() -> None:
    """Once per process, loudly: the reader still works, with many times the input CPU per sample."""
    if not _warned:
        _warned.append(True)
        log.warning("kafka-python %s is not %s, whose record decoding the fast path replaces "
                    "(Fetcher._unpack_message_set, Fetcher.PartitionRecords): records are decoded by "
                    "kafka-python's own code, about 12 us "
                    "per record instead of 0.1 us, CPU taken from training. Install the pinned kafka-python "
                    "(requirements.txt) to get it back.", kafka.__version__, KNOWN_KAFKA_PYTHON)


def install(consumer, compiled: bool = True) -> bool:
    """Makes ``consumer.poll`` return FastRecords (offset, value) for plain batches; False if not possible
    (another kafka-python than the pinned one: a warning says so, once).

    ``compiled`` False keeps to the Python decoder even where the compiled one was built (tests, benchmarks).
    """
    fetcher = getattr(consumer, "_fetcher", None)
    if isinstance(fetcher, Fetcher) and hasattr(Fetcher, "_unpack_message_set"):  # kafka-python 2.0
        unpack = functools.partial(_unpack_message_set, compiled=compiled)
        fetcher._unpack_message_set = types.MethodType(unpack, fetcher)  # pylint: disable=protected-access
        return True
    if isinstance(fetcher, Fetcher) and _partition_records_known():  # kafka-python 3.0
        fetcher.PartitionRecords = _fast_partition_records(compiled)
        fetcher._fetchable_partitions = _no_idle_fetch_while_buffered(fetcher)  # pylint: disable=protected-access
        return True
    _warn_fallback()
    return False


def _partition_records_known() -> bool:
    records = getattr(Fetcher, "PartitionRecords", None)
    return records is not None and all(hasattr(records, name) for name in ("take", "drain", "_unpack_records")) \
        and hasattr(Fetcher, "_fetchable_partitions")


def _no_idle_fetch_while_buffered(fetcher):
    """kafka-python 3.0's ``_fetchable_partitions``, except that while records of some partition are still
    buffered it offers no fetch made only of partitions that are caught up.

    3.0 fetches a partition again as soon as its records were handed out, while another partition's
    records still wait in its buffer (that one is not fetchable until they are). When the first is at its
    end, such a fetch carries only partitions without data: the broker holds it for fetch_max_wait_ms, and
    the backlogged partition, its buffer drained meanwhile, cannot be fetched until it returns (one fetch in
    flight per broker). Reading a backlog of two partitions where one ended first, that was a ~100 ms stall
    every ~5,000 records (a quarter of the reading time); the fetch is sent instead with the next one.
    """
    fetchable = fetcher._fetchable_partitions  # pylint: disable=protected-access

    def caught_up(tp) -> bool:
        state = fetcher._subscriptions.assignment.get(tp)  # pylint: disable=protected-access
        return state is not None and state.highwater is not None and state.position is not None \
            and state.position.offset >= state.highwater

    def fetchable_partitions():
        partitions = fetchable()
        buffered = fetcher._next_partition_records or fetcher._completed_fetches  # pylint: disable=protected-access
        if partitions and buffered and all(caught_up(tp) for tp in partitions):
            return []
        return partitions

    return fetchable_partitions


def _fast_partition_records(compiled: bool):
    """kafka-python 3.0's PartitionRecords with the records decoded at once (plain v2 batches by decode_batch)
    and handed out by slicing a list; ``next_fetch_offset`` follows what ``take`` handed out, as its fetcher
    expects. Decoded at the first ``take``: the fetcher still reads ``records`` after building one."""
    base = Fetcher.PartitionRecords

    class FastPartitionRecords(base):  # type: ignore[valid-type,misc]
        next_fetch_offset: int  # (kafka-python's)

        def __init__(self, fetch_offset, tp, records, *args, **kwargs):
            super().__init__(fetch_offset, tp, records, *args, **kwargs)  # its record iterator is never started
            uncommitted = str(getattr(self.isolation_level, "name", self.isolation_level)).upper().endswith("UNCOMMITTED")
            self._committed = not uncommitted
            self._pending: Optional[tuple] = (tp, records, fetch_offset)
            self._fast: Optional[List] = None
            self._at = self._end = 0

        def _decode_all(self, tp, records, fetch_offset):
            out: List = []
            end = fetch_offset
            batch = records.next_batch()
            while batch is not None:
                v2 = isinstance(batch, DefaultRecordBatch)
                if v2 and self._committed and self._aborted(batch):
                    pass  # an aborted transaction's batch, or a marker: skipped, the position moves past it
                elif v2 and not batch.attributes & _SLOW_ATTRIBUTES:
                    self.leader_epoch = batch.leader_epoch
                    try:
                        out.extend(decode_batch(batch._buffer, batch.base_offset,  # pylint: disable=protected-access
                                                batch._num_records, batch.last_offset_delta,  # pylint: disable=protected-access
                                                compiled=compiled))
                    except CorruptRecordException as e:
                        raise CorruptRecordException(f"{tp}: invalid record batch at offset {batch.base_offset}: "
                                                     f"{e}") from e
                elif not (v2 and batch.is_control_batch):
                    out.extend(FastRecord(record.offset, record.value) for record in batch)  # compressed, legacy
                end = batch.next_offset if v2 else (out[-1].offset + 1 if out else end)
                batch = records.next_batch()
            if out and out[0].offset < fetch_offset:  # a fetch may start inside a batch
                out = [r for r in out if r.offset >= fetch_offset]
            return out, end

        def _aborted(self, batch) -> bool:
            """Whether a read_committed reader skips ``batch`` (Kafka's rule, see the module docstring);
            keeps the aborted producers up to date as it goes."""
            if not batch.has_producer_id():
                return False
            self._consume_aborted_transactions_up_to(batch.last_offset)
            if self._contains_abort_marker(batch):
                self.aborted_producer_ids.discard(batch.producer_id)
                return True
            return self._is_batch_aborted(batch)

        def take(self, n=None):
            if self._pending is not None:
                self._fast, self._end = self._decode_all(*self._pending)
                self._pending = None
            if self._fast is None:
                return super().take(n)
            if self.record_iterator is None:
                return []
            part = self._fast[self._at:self._at + n] if n else self._fast[self._at:]
            self._at += len(part)
            self.records_read += len(part)
            if self._at >= len(self._fast):
                self.next_fetch_offset = max(self._end, part[-1].offset + 1 if part else self.next_fetch_offset)
                self.drain()
            elif part:
                self.next_fetch_offset = part[-1].offset + 1
            return part

    return FastPartitionRecords
