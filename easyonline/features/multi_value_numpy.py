"""Multi-value fields (tags, weighted tags, behaviour sequences) on the array path, without TensorFlow.

The reader process parses them as ``multi_value_tf.py`` does in TensorFlow,
into the flat values and row splits a ``tf.RaggedTensor`` holds: split on the
feature's separator, empty and padding values dropped, ids hashed, read as
ints (negative ones dropped) or bucketized, weighted values ("id:weight") of
weight <= 0 dropped, a sequence cut to its first ``max_length`` ids (the most
recent). A value TensorFlow would reject or flag (a weight or an int id that
is not a plain decimal, "a:", ":1", "a:1:2") declines the whole batch, which
then goes to CsvParser, which rejects just that line with its reason. The
compiled decoder (``_csv_decoder.c``, ``convert_multi``) does the same in C;
the numpy code here is its fallback and its reference in the tests.
"""
import dataclasses
from typing import List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from easyonline.features.cross_ids_numpy import bucketize_np
from easyonline.features.feature_spec import HASH_BUCKETS, FeatureSpecs, IdFeature, weights_key
from easyonline.features.fingerprint import fingerprint64, hash_bucket
from easyonline.features.plain_decimals import floats, ints

# Sub kinds of _csv_decoder.parse's multi columns.
_SUB_KINDS = {"hash": 1, "int": 2, "bucket": 3}
_NOT_A_SEPARATOR = '"\n\r'


class RaggedArray(NamedTuple):
    """A [B, None] feature as the numpy arrays of a ``tf.RaggedTensor``: what the trainer's step and a cluster's
    feed (``flat_values``, ``row_splits``) read."""
    flat_values: np.ndarray
    row_splits: np.ndarray

    def row_lengths(self) -> np.ndarray:
        return np.diff(self.row_splits)


@dataclasses.dataclass(frozen=True)
class MultiColumn:
    """One multi-value feature's field and how its values become ids (and weights)."""
    name: str
    index: int  # position in the line
    sub: str  # "hash" | "int" | "bucket"
    separator: bytes
    kv_separator: bytes  # b"": not weighted
    max_length: int  # a sequence's first ids kept; 0: all
    padding: Tuple[bytes, ...]
    default: bytes  # what an empty field reads as
    boundaries: Tuple[float, ...]

    @classmethod
    def of(cls, feature: IdFeature, index: int, default: str) -> "MultiColumn":
        sub = "hash" if feature.string_ids else "bucket" if feature.boundaries else "int"
        return cls(feature.name, index, sub, feature.separator.encode(), feature.kv_separator.encode(),
                   feature.max_length if feature.sequence else 0, tuple(p.encode() for p in feature.padding),
                   default.encode(), feature.boundaries)

    @property
    def outputs(self) -> Tuple[Tuple[str, type], ...]:
        """(feature key, dtype) of what it adds to a batch: its ids, then a weighted tag's weights."""
        ids = ((self.name, np.int64),)
        return ids + ((weights_key(self.name), np.float32),) if self.kv_separator else ids

    def capacity(self, blob_length: int, count: int) -> int:
        """At most how many values a batch of ``blob_length`` bytes gives (non-empty values need a separator
        between them; an empty field reads as the default)."""
        bound = (blob_length + count * (len(self.default) + 2)) // 2 + 1
        return min(bound, count * self.max_length) if self.max_length else bound

    def native(self, ids: np.ndarray, splits: np.ndarray, weights: Optional[np.ndarray]) -> tuple:
        """The tuple _csv_decoder.parse reads for it (see ``Multi`` there)."""
        return (self.index, _SUB_KINDS[self.sub], self.separator[0], self.kv_separator[0] if self.kv_separator else -1,
                self.max_length, self.padding, self.default, np.asarray(self.boundaries, np.float32).tobytes(),
                ids, splits, weights)


def multi_value_refusal(specs: FeatureSpecs) -> str:
    """Why the array path cannot parse the config's multi-value features ("" when it can: every one a TagFeature
    (plain or weighted) or a SequenceFeature (ids, or numbers bucketized; one value a position) with one-byte
    separators, on a field nothing else reads)."""
    split = {name for f in specs.id_features for name in f.split_inputs}
    others = {name for f in specs.id_features if not f.multi_value for name in f.input_names}
    others |= {f.input_name for f in specs.raw_features} | set(specs.label_names) | {specs.sample_weight}
    if split & others:  # (that field decodes as a string for every reader of it)
        return f"field {sorted(split & others)[0]!r} is read as several values and also as one"

    def one_byte(separator: str) -> bool:
        return len(separator.encode()) == 1 and separator not in _NOT_A_SEPARATOR and separator != specs.separator

    for f in specs.id_features:
        if not f.multi_value:
            continue
        why = ("crosses a multi-value field" if f.combo else "is a TagFeature with boundaries"
               if f.boundaries and not f.sequence else "is a sequence of numbers fed as numbers" if f.raw_width
               else "has several values a position" if f.multi_separator
               else "has a separator of more than one byte" if not one_byte(f.separator)
               or (f.weighted and not one_byte(f.kv_separator)) else "")
        if why:
            return f"{f.name} {why}"
    return ""


def aligned_positions(specs: FeatureSpecs, names: Sequence[str]) -> Tuple[Tuple[int, ...], ...]:
    """The sequences that must be as long as each other in a sample (one target attention's), as positions in
    ``names``."""
    at = {name: i for i, name in enumerate(names)}
    return tuple(tuple(at[n] for n in group) for group in specs.aligned_sequences if len(group) > 1)


def lengths_align(ragged: Sequence[RaggedArray], groups: Tuple[Tuple[int, ...], ...]) -> bool:
    """False when the sequences of one attention differ in length in some sample (CsvParser rejects it:
    bad_sequence)."""
    for group in groups:
        first = ragged[group[0]].row_lengths()
        if any(not np.array_equal(ragged[i].row_lengths(), first) for i in group[1:]):
            return False
    return True


def parse_numpy(column: MultiColumn, blob: bytes, starts: np.ndarray, lengths: np.ndarray) -> Optional[List[RaggedArray]]:
    """The column's ids (and weights) of every line, or None when a value declines the batch."""
    rows, tokens = [], []
    for row, (start, length) in enumerate(zip(starts.tolist(), lengths.tolist())):
        text = blob[start:start + length] if length else column.default
        values = [t for t in text.split(column.separator) if t]
        rows.extend([row] * len(values))
        tokens.extend(values)
    count = len(starts)
    rows_array = np.asarray(rows, np.int64)
    weights = None
    if column.kv_separator:
        parts = [t.partition(column.kv_separator) for t in tokens]
        if any(not kv or not key for key, kv, _ in parts):
            return None
        weight_texts = [w for _, _, w in parts]
        if any(not w for w in weight_texts):
            return None  # ("a:": no number)
        weights = _numbers(weight_texts, floats)
        if weights is None:
            return None
        tokens = [key for key, _, _ in parts]
        keep = (weights > 0) & ~np.isin(np.arange(len(tokens)), _padding_at(tokens, column.padding))
    else:
        keep = ~np.isin(np.arange(len(tokens)), _padding_at(tokens, column.padding))
    kept = [t for t, k in zip(tokens, keep.tolist()) if k]
    rows_array = rows_array[keep]
    if weights is not None:
        weights = weights[keep]
    ids = _ids(column, kept)
    if ids is None:
        return None
    if column.sub == "int":  # negative int ids dropped (a weighted one with its weight)
        positive = ids >= 0
        ids, rows_array = ids[positive], rows_array[positive]
        if weights is not None:
            weights = weights[positive]
    splits = _splits(rows_array, count)
    if column.max_length:
        position = np.arange(len(ids)) - splits[rows_array]
        first = position < column.max_length
        ids, rows_array = ids[first], rows_array[first]
        splits = _splits(rows_array, count)
    out = [RaggedArray(ids, splits)]
    if weights is not None:
        out.append(RaggedArray(weights.astype(np.float32), splits))
    return out


def _padding_at(tokens: List[bytes], padding: Tuple[bytes, ...]) -> List[int]:
    return [i for i, t in enumerate(tokens) if t in padding] if padding else []


def _splits(rows: np.ndarray, count: int) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=count))]).astype(np.int64)


def _numbers(tokens: List[bytes], convert) -> Optional[np.ndarray]:
    """``convert`` (``ints`` or ``floats``) of non-empty tokens, flat; None if one is not plain."""
    if not tokens:
        return np.zeros(0, np.int64 if convert is ints else np.float32)
    blob = b"".join(tokens)
    lengths = np.fromiter((len(t) for t in tokens), np.int64, len(tokens))
    starts = np.cumsum(lengths) - lengths
    parsed = convert(blob, starts[:, None], lengths[:, None], [b""])
    return None if parsed is None else parsed[:, 0]


def _ids(column: MultiColumn, tokens: List[bytes]) -> Optional[np.ndarray]:
    if column.sub == "int":
        return _numbers(tokens, ints)
    if column.sub == "bucket":
        numbers = _numbers(tokens, floats)
        return None if numbers is None else bucketize_np(numbers, column.boundaries)
    if not tokens:
        return np.zeros(0, np.int64)
    blob = b"".join(tokens)
    lengths = np.fromiter((len(t) for t in tokens), np.int64, len(tokens))
    fingerprints, too_long = fingerprint64(blob, np.cumsum(lengths) - lengths, lengths)
    if too_long.any():
        return None
    return hash_bucket(fingerprints, HASH_BUCKETS).astype(np.int64)
