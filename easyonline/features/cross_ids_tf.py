"""Crossed and bucketized ids in TensorFlow: the trainer's parser and the export's serving signature.

The same numbers as the numpy definitions in cross_ids_numpy.py (which explains the
scheme); tests/unit/test_cross_ids_numpy.py holds the two to each other.
"""
from typing import Sequence, Union

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.features.cross_ids_numpy import MUL
from easyonline.features.feature_spec import HASH_BUCKETS, PADDING_ID

tf = ensure_legacy_keras()


def _shift_mix(value: tf.Tensor) -> tf.Tensor:
    return tf.bitwise.bitwise_xor(value, tf.bitwise.right_shift(value, tf.constant(47, tf.uint64)))


def fingerprint_cat64(first: tf.Tensor, second: tf.Tensor) -> tf.Tensor:
    """FingerprintCat64 on uint64 tensors, as ``fingerprint_cat64_np``."""
    mul = tf.constant(MUL, tf.uint64)
    result = tf.bitwise.bitwise_xor(first, mul)
    result = tf.bitwise.bitwise_xor(result, _shift_mix(second * mul) * mul)
    result = result * mul
    return _shift_mix(_shift_mix(result) * mul)


def _as_uint64(ids: tf.Tensor) -> tf.Tensor:
    return tf.cast(ids, tf.uint64)  # (non-negative ids: the same number)


Ids = Union[tf.Tensor, tf.RaggedTensor]


def _pairs(left: tf.RaggedTensor, right: tf.RaggedTensor):
    """Every (left value, right value) pair of each row, row by row, left-major: two ragged tensors."""
    left_lengths, right_lengths = left.row_lengths(), right.row_lengths()
    lengths = left_lengths * right_lengths
    rows = tf.repeat(tf.range(tf.shape(lengths, out_type=tf.int64)[0]), lengths)
    within = tf.range(tf.reduce_sum(lengths)) - tf.gather(tf.cumsum(lengths, exclusive=True), rows)
    right_count = tf.gather(right_lengths, rows)
    left_index = tf.gather(left.row_starts(), rows) + within // tf.maximum(right_count, 1)
    right_index = tf.gather(right.row_starts(), rows) + within % tf.maximum(right_count, 1)
    splits = tf.concat([[0], tf.cumsum(lengths)], 0)
    return (tf.RaggedTensor.from_row_splits(tf.gather(left.flat_values, left_index), splits, validate=False),
            tf.RaggedTensor.from_row_splits(tf.gather(right.flat_values, right_index), splits, validate=False))


def cross_ids(components: Sequence[Ids], buckets: int = 0) -> Ids:
    """The cross ids of the inputs' ids ([B] int64, or ragged [B, None] for multi-valued inputs)."""
    modulus = tf.constant(buckets or HASH_BUCKETS, tf.uint64)
    if not any(isinstance(c, tf.RaggedTensor) for c in components):
        h = tf.fill(tf.shape(components[0]), tf.constant(len(components), tf.uint64))
        padding = tf.zeros(tf.shape(components[0]), tf.bool)
        for column in components:
            padding = tf.logical_or(padding, column < 0)
            h = fingerprint_cat64(h, _as_uint64(column))
        ids = tf.cast(tf.math.floormod(h, modulus), tf.int64)
        return tf.where(padding, tf.constant(PADDING_ID, tf.int64), ids)
    ragged = []
    for column in components:
        if not isinstance(column, tf.RaggedTensor):  # one value per row; a padding id leaves the row empty
            column = tf.ragged.boolean_mask(tf.expand_dims(column, 1), tf.expand_dims(column >= 0, 1))
        ragged.append(tf.cast(column, tf.int64))
    first = ragged[0]
    start = tf.fill(tf.shape(first.flat_values), tf.constant(len(components), tf.uint64))
    h = first.with_flat_values(fingerprint_cat64(start, _as_uint64(first.flat_values)))
    for column in ragged[1:]:
        h, values = _pairs(h, column)
        h = h.with_flat_values(fingerprint_cat64(h.flat_values, _as_uint64(values.flat_values)))
    return h.with_flat_values(tf.cast(tf.math.floormod(h.flat_values, modulus), tf.int64))


def bucketize(values: tf.Tensor, boundaries: Sequence[float]) -> tf.Tensor:
    return tf.cast(tf.raw_ops.Bucketize(input=tf.cast(values, tf.float32), boundaries=list(boundaries)), tf.int64)
