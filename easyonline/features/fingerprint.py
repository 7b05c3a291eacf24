"""TensorFlow's string hash (FarmHash Fingerprint64) for many strings at once, in numpy.

``tf.strings.to_hash_bucket_fast`` is ``Fingerprint64(s) % buckets``; this
computes the same numbers for substrings of one buffer without creating a
string object per id, so the input process can hash a batch's ids without
TensorFlow. Strings of up to 64 bytes are covered (the ids of real streams);
longer ones are reported so the caller can use TensorFlow for that batch.
The port follows farmhashna::Hash64 (farmhash.cc, MIT licence); the tests
check it against TensorFlow on random strings of every length.
"""
from typing import Tuple

import numpy as np

MAX_LENGTH = 64
_K0 = np.uint64(0xc3a5c85c97cb3127)
_K1 = np.uint64(0xb492b66fbe98f273)
_K2 = np.uint64(0x9ae16a3b2f90404f)
_U = np.uint64


def _rotate(value: np.ndarray, shift: int) -> np.ndarray:
    return (value >> _U(shift)) | (value << _U(64 - shift))


def _shift_mix(value: np.ndarray) -> np.ndarray:
    return value ^ (value >> _U(47))


def _hash_len_16(u: np.ndarray, v: np.ndarray, mul: np.ndarray) -> np.ndarray:
    a = _shift_mix((u ^ v) * mul)
    b = _shift_mix((v ^ a) * mul)
    return b * mul


class _Loads:
    """Little-endian 8-, 4- and 1-byte loads at any byte offset of a buffer (padded so loads never run off)."""

    def __init__(self, buffer: bytes):
        padded = buffer + b"\0" * 8
        self._u64 = np.ndarray((len(buffer) + 1,), "<u8", padded, 0, (1,))
        self._u32 = np.ndarray((len(buffer) + 5,), "<u4", padded, 0, (1,))
        self._u8 = np.frombuffer(padded, np.uint8)

    def u64(self, positions):
        return self._u64[positions].astype(np.uint64)

    def u32(self, positions):
        return self._u32[positions].astype(np.uint64)

    def u8(self, positions):
        return self._u8[positions].astype(np.uint64)


def fingerprint64(buffer: bytes, starts: np.ndarray, lengths: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(uint64 fingerprints, mask of strings too long to hash here) of ``buffer[starts:starts+lengths]``."""
    starts = np.asarray(starts, np.int64)
    lengths = np.asarray(lengths, np.int64)
    out = np.full(starts.shape, _K2, np.uint64)  # the hash of the empty string
    load = _Loads(buffer)
    shortest, longest = int(lengths.min(initial=0)), int(lengths.max(initial=0))
    with np.errstate(over="ignore"):
        for low, high, fn in ((1, 3, _len_1_to_3), (4, 7, _len_4_to_7), (8, 16, _len_8_to_16),
                              (17, 32, _len_17_to_32), (33, 64, _len_33_to_64)):
            if high < shortest or low > longest:
                continue
            if low <= shortest and longest <= high:  # every string in this class: no selection needed
                return fn(load, starts, lengths.astype(np.uint64)), lengths > MAX_LENGTH
            which = np.flatnonzero((lengths >= low) & (lengths <= high))
            if which.size:
                out[which] = fn(load, starts[which], lengths[which].astype(np.uint64))
    return out, lengths > MAX_LENGTH


def _len_1_to_3(load, s, n):
    a = load.u8(s)
    b = load.u8(s + (n >> _U(1)).astype(np.int64))
    c = load.u8(s + n.astype(np.int64) - 1)
    y = a + (b << _U(8))
    z = n + (c << _U(2))
    return _shift_mix((y * _K2) ^ (z * _K0)) * _K2


def _len_4_to_7(load, s, n):
    mul = _K2 + n * _U(2)
    a = load.u32(s)
    return _hash_len_16(n + (a << _U(3)), load.u32(s + n.astype(np.int64) - 4), mul)


def _len_8_to_16(load, s, n):
    mul = _K2 + n * _U(2)
    a = load.u64(s) + _K2
    b = load.u64(s + n.astype(np.int64) - 8)
    c = _rotate(b, 37) * mul + a
    d = (_rotate(a, 25) + b) * mul
    return _hash_len_16(c, d, mul)


def _len_17_to_32(load, s, n):
    mul = _K2 + n * _U(2)
    end = s + n.astype(np.int64)
    a = load.u64(s) * _K1
    b = load.u64(s + 8)
    c = load.u64(end - 8) * mul
    d = load.u64(end - 16) * _K2
    return _hash_len_16(_rotate(a + b, 43) + _rotate(c, 30) + d, a + _rotate(b + _K2, 18) + c, mul)


def _len_33_to_64(load, s, n):
    mul = _K2 + n * _U(2)
    end = s + n.astype(np.int64)
    a = load.u64(s) * _K2
    b = load.u64(s + 8)
    c = load.u64(end - 8) * mul
    d = load.u64(end - 16) * _K2
    y = _rotate(a + b, 43) + _rotate(c, 30) + d
    z = _hash_len_16(y, a + _rotate(b + _K2, 18) + c, mul)
    e = load.u64(s + 16) * mul
    f = load.u64(s + 24)
    g = (y + load.u64(end - 32)) * mul
    h = (z + load.u64(end - 24)) * mul
    return _hash_len_16(_rotate(e + f, 43) + _rotate(g, 30) + h, e + _rotate(f + a, 18) + g, mul)


def hash_bucket(fingerprints: np.ndarray, buckets: int) -> np.ndarray:
    """``Fingerprint64 % buckets`` as int64, as tf.strings.to_hash_bucket_fast returns it."""
    return (fingerprints % np.uint64(buckets)).astype(np.int64)
