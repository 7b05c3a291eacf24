"""Plain decimals (``-12``, ``0.25``, ``.5``) read from many fields of one buffer at once, in numpy.

The array path's numpy fallback (vector_csv.py, multi_value_numpy.py) reads
numbers with array arithmetic instead of a string per field. It reads what
``tf.io.decode_csv`` and ``tf.strings.to_number`` read, bit for bit, or
declines: only plain decimals of at most 15 digits (18 for ints), and a
float only where rounding it to float32 is unambiguous.
"""
from typing import Optional, Sequence

import numpy as np

_MAX_FLOAT_DIGITS = 15  # below 2**53: a decimal's digits are exact in float64
_MAX_INT_DIGITS = 18  # below 2**63
_POW10 = 10.0 ** np.arange(23)
_FLOAT32_HALF_ULP_BITS = np.uint64(1 << 28)  # a float64 exactly between two float32 values
_LOW_29_BITS = np.uint64((1 << 29) - 1)

# Byte classes of a plain decimal: 0 none (past the end), 1 digit, 2 dot, 3 minus, 4 anything else.
_CLASS = np.full(256, 4, np.uint8)
_CLASS[0] = 0
_CLASS[ord("0"):ord("9") + 1] = 1
_CLASS[ord(".")] = 2
_CLASS[ord("-")] = 3
# Horner's rule over every byte, m = m * _SCALE[b] + _DIGIT[b]: only digits shift the mantissa.
_SCALE = np.where(_CLASS == 1, 10, 1).astype(np.int64)
_DIGIT = np.where(_CLASS == 1, np.arange(256) - ord("0"), 0).astype(np.int64)


def _chars(blob: bytes, starts: np.ndarray, lengths: np.ndarray, max_digits: int):
    """The fields as a [width, count] byte matrix (0 past each field's end), or None if one is too long."""
    width = int(lengths.max(initial=0))
    if width > max_digits + 2:  # sign, digits, dot
        return None
    data = np.frombuffer(blob + b"\0" * width, np.uint8)
    positions = np.arange(width)[:, None]
    return np.where(positions < lengths, data[starts + positions], 0)


def _digits(chars: np.ndarray, max_digits: int, allow_dot: bool):
    """(mantissa int64, digits after the dot, negative) of plain decimals (``[width, count]`` bytes), or None.

    A plain decimal is an optional leading minus, digits and at most one dot, with 1 to ``max_digits`` digits.
    """
    classes = _CLASS[chars]
    negative = classes[0] == 3
    if np.any(classes == 4) or np.any(classes[1:] == 3):
        return None
    digit_count = np.count_nonzero(classes == 1, axis=0)
    is_dot = classes == 2
    dots = np.count_nonzero(is_dot, axis=0)
    if not (np.all(digit_count >= 1) and np.all(digit_count <= max_digits) and np.all(dots <= int(allow_dot))):
        return None
    mantissa = np.zeros(chars.shape[1], np.int64)
    for row in chars:
        mantissa *= _SCALE[row]
        mantissa += _DIGIT[row]
    digits_before_dot = np.argmax(is_dot, axis=0) - negative
    fraction = np.where(dots > 0, digit_count - digits_before_dot, 0)
    return mantissa, fraction, negative


def _defaults(shape, defaults: Sequence[bytes], convert, dtype) -> np.ndarray:
    """A [count, columns] array holding each column's default (0 when it has none)."""
    return np.tile(np.array([convert(d) if d else 0 for d in defaults], dtype), (shape[0], 1))


def _present_decimals(blob: bytes, starts: np.ndarray, lengths: np.ndarray, max_digits: int, allow_dot: bool):
    """(flat index of the non-empty fields, their (mantissa, fraction, negative)), the latter None unless every
    one is a plain decimal."""
    starts, lengths = starts.ravel(), lengths.ravel()
    present = slice(None) if lengths.all() else np.flatnonzero(lengths)
    if not lengths[present].size:
        return present, (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, bool))
    matrix = _chars(blob, starts[present], lengths[present], max_digits)
    return present, None if matrix is None else _digits(matrix, max_digits, allow_dot)


def floats(blob: bytes, starts: np.ndarray, lengths: np.ndarray, defaults: Sequence[bytes]) -> Optional[np.ndarray]:
    """float32 of plain decimals as strtof rounds them; None if one is not plain or rounding is ambiguous."""
    present, parsed = _present_decimals(blob, starts, lengths, _MAX_FLOAT_DIGITS, allow_dot=True)
    if parsed is None:
        return None
    mantissa, fraction, negative = parsed
    exact = mantissa.astype(np.float64) / _POW10[fraction]  # both exact: one correctly rounded division
    # Rounding that float64 to float32 equals rounding the decimal itself unless it landed exactly
    # halfway between two float32 values; then the decimal might be on either side: let TF decide.
    if np.any((exact.view(np.uint64) & _LOW_29_BITS) == _FLOAT32_HALF_ULP_BITS):
        return None
    out = _defaults(starts.shape, defaults, float, np.float32)
    out.ravel()[present] = np.where(negative, -exact, exact).astype(np.float32)  # out is contiguous: a view
    return out


def ints(blob: bytes, starts: np.ndarray, lengths: np.ndarray, defaults: Sequence[bytes]) -> Optional[np.ndarray]:
    present, parsed = _present_decimals(blob, starts, lengths, _MAX_INT_DIGITS, allow_dot=False)
    if parsed is None:
        return None
    mantissa, _, negative = parsed
    out = _defaults(starts.shape, defaults, lambda d: int(float(d)), np.int64)
    out.ravel()[present] = np.where(negative, -mantissa, mantissa)
    return out
