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
Any other batch (compressed, legacy format, transactional markers) goes
through kafka-python's own decoder, so nothing is decoded differently.

``install(consumer)`` swaps the decoder of one consumer; everything else
(fetching, positions, errors, retries) stays kafka-python's.
"""
import collections
import functools
import itertools
import logging
import types
from typing import List

import kafka
from kafka.consumer.fetcher import Fetcher
from kafka.errors import CorruptRecordException
from kafka.record.default_records import DefaultRecordBatch

try:
    from easyonline.inputs import _record_decoder
except ImportError:  # setup.py builds it; without a C compiler decode_batch_python does the same, slower
    _record_decoder = None

log = logging.getLogger(__name__)

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
    values = []
    append_value = values.append
    offsets = None if gapless else []
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
        offsets = range(base_offset, base_offset + count)
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


KNOWN_KAFKA_PYTHON = "2.0."  # the versions whose Fetcher._unpack_message_set this module replaces
_warned = []


def _warn_fallback() -> None:
    """Once per process, loudly: the reader still works, with many times the input CPU per sample."""
    if not _warned:
        _warned.append(True)
        log.warning("kafka-python %s is not %sx, whose record decoder the fast path replaces "
                    "(Fetcher._unpack_message_set): records are decoded by kafka-python's own code, about 12 us "
                    "per record instead of 0.1 us, CPU taken from training. Install the pinned kafka-python "
                    "(requirements.txt) to get it back.", kafka.__version__, KNOWN_KAFKA_PYTHON)


def install(consumer, compiled: bool = True) -> bool:
    """Makes ``consumer.poll`` return FastRecords (offset, value) for plain batches; False if not possible
    (another kafka-python than the pinned one: a warning says so, once).

    ``compiled`` False keeps to the Python decoder even where the compiled one was built (tests, benchmarks).
    """
    fetcher = getattr(consumer, "_fetcher", None)
    if not isinstance(fetcher, Fetcher) or not hasattr(Fetcher, "_unpack_message_set"):
        _warn_fallback()
        return False
    unpack = functools.partial(_unpack_message_set, compiled=compiled)
    fetcher._unpack_message_set = types.MethodType(unpack, fetcher)  # pylint: disable=protected-access
    return True
