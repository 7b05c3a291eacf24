"""Ids of crossed features (ComboFeature) and bucketized numbers (RawFeature with boundaries).

The trainer's parser (TensorFlow), the export's serving signature
(TensorFlow) and the reader process's fast parser (numpy, after the
compiled or numpy decoder) must give every sample the same ids. So the
cross is defined on the inputs' int64 ids, in uint64 arithmetic that both
libraries compute alike:

    h = number of inputs
    for each input id x:  h = fingerprint_cat64(h, x)
    cross id = h mod hash_bucket_size (default 2^63 - 1, the ids' space)

``fingerprint_cat64`` is TensorFlow's FingerprintCat64 (the combiner of
``tf.sparse.cross_hashed``). An input with several values per sample (a
``combo_input_seps`` separator) crosses every value with every other
input's: a sample gets the product of the counts. A padding id (-1) in a
single-valued input makes the cross padding; in a multi-valued input it is
dropped. A bucketized number's id is the index of its bucket: the number of
boundaries <= it (``tf.raw_ops.Bucketize`` and ``np.searchsorted(...,
side="right")``, both comparing float32).

This module is the numpy side, for the reader process (no TensorFlow
there); ``cross_ids_tf`` computes the same in TensorFlow.
"""
from typing import Sequence

import numpy as np

from easyonline.features.feature_spec import HASH_BUCKETS, PADDING_ID

MUL = 0xc6a4a7935bd1e995


def _shift_mix_np(value: np.ndarray) -> np.ndarray:
    return value ^ (value >> np.uint64(47))


def fingerprint_cat64_np(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """TensorFlow's FingerprintCat64 on uint64 arrays (wrapping arithmetic)."""
    mul = np.uint64(MUL)
    with np.errstate(over="ignore"):
        result = first ^ mul
        result ^= _shift_mix_np(second * mul) * mul
        result *= mul
        return _shift_mix_np(_shift_mix_np(result) * mul)


def cross_ids_np(columns: Sequence[np.ndarray], buckets: int = 0) -> np.ndarray:
    """The cross ids of single-valued int64 id columns (the reader process's path)."""
    h = np.full(columns[0].shape, len(columns), np.uint64)
    padding = np.zeros(columns[0].shape, bool)
    for column in columns:
        padding |= column < 0
        h = fingerprint_cat64_np(h, column.astype(np.uint64))
    ids = (h % np.uint64(buckets or HASH_BUCKETS)).astype(np.int64)
    return np.where(padding, PADDING_ID, ids)


def bucketize_np(values: np.ndarray, boundaries: Sequence[float]) -> np.ndarray:
    return np.searchsorted(np.asarray(boundaries, np.float32), values.astype(np.float32), side="right").astype(np.int64)
