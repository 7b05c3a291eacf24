"""Turns a batch of CSV lines into feature tensors in one TensorFlow call.

The happy path is a single ``tf.io.decode_csv`` over the whole batch (string
ids hashed to int64, int ids passed through). A line with the wrong number of
fields is rejected on the host before decoding; if decoding still fails (a
non-numeric number, an id out of int64 range) the batch is split line by line
so that only the bad lines are rejected, each with its reason.
"""
import collections.abc
import csv
import dataclasses
import functools
import re
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.rejections import (BAD_LABEL, BAD_SEQUENCE, BAD_TAG_WEIGHT, BAD_VALUE, BAD_WEIGHT, FIELD_COUNT,
                                        INVALID_UTF8, rejection)
from easyonline.features.cross_ids_tf import bucketize, cross_ids
from easyonline.features.feature_spec import (HASH_BUCKETS, PADDING_ID, FeatureSpecs, IdFeature, positions_key,
                                              weights_key)
from easyonline.features.multi_value_tf import multi_value_ids, sequence_lengths
from easyonline.features.raw_vectors import bad_vector_reason, checked_vectors, raw_vectors
from easyonline.features.label_kinds import SAMPLE_WEIGHT_KEY
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()

_FT = pipeline_pb2.DataConfig.FieldType


@dataclasses.dataclass
class ParsedBatch:
    """Features keyed by feature name, labels, and the lines that were rejected.

    ``labels`` is the first label field's [B] (what the metrics and callbacks
    read); ``labels_by_name`` gives every label the parser read, by label
    field name, which is what the model's tasks take (``compute_loss``).

    ``lines`` are the B samples as CSV lines in input_fields order (JSON and
    custom records converted), when the batch came from lines; predictions
    are written next to them. ``vectors``: the ``vector_csv.VectorBatch`` the
    batch was made from, if it was (a trainer then feeds its arrays whole).
    """
    features: Mapping[str, tf.Tensor]
    labels: tf.Tensor
    size: int
    rejected: List[Tuple[bytes, str]]
    lines: Optional[List[bytes]] = None
    vectors: Optional[object] = None
    #: every label field read, by name (None: only ``labels``, the first; sources that build batches
    #: themselves may leave it out)
    label_dict: Optional[Dict[str, tf.Tensor]] = None
    #: data_config.sample_weight's [B] float32 (each finite and >= 0), None when the config names none
    sample_weights: Optional[tf.Tensor] = None

    def labels_by_name(self, first_label: str) -> Dict[str, tf.Tensor]:
        """The labels by label field name; ``first_label`` names ``labels`` when the batch has no dict."""
        return self.label_dict if self.label_dict is not None else {first_label: self.labels}

    @classmethod
    def from_vectors(cls, vectors) -> "ParsedBatch":
        """The batch ``vector_csv.VectorCsvParser`` parsed: its arrays, copied (they may be views of a
        shared-memory slot about to be reused), and features made from them only when asked.

        A trainer feeds the arrays to its step, which splits them into features
        inside the graph: a tensor per feature made here (two conversions and
        two unstacks, ~0.15 ms a batch) held the GIL the training thread needs.
        """
        owned = vectors.owned()
        labels = {name: tf.constant(column) for name, column in owned.label_columns.items()}
        weights = labels.pop(SAMPLE_WEIGHT_KEY, None)
        return cls(_ColumnFeatures(owned), labels[owned.label_names[0]], owned.size, [], vectors=owned,
                   label_dict=labels, sample_weights=weights)

    def host_features(self) -> Mapping[str, object]:
        """The features for host-side use (a feed dict, the trained keys): the arrays' columns when there
        are arrays (no tensor per feature made and read back), else the features."""
        if self.vectors is not None:
            return self.vectors.features
        return self.features


class _ColumnFeatures(collections.abc.Mapping):
    """A VectorBatch's columns as features, made into tensors at the first access (two unstacks)."""

    def __init__(self, vectors):
        self._vectors = vectors

    @functools.cached_property
    def _tensors(self) -> Dict[str, tf.Tensor]:
        vectors = self._vectors
        features = dict(zip(vectors.id_names, tf.unstack(tf.constant(vectors.ids), len(vectors.id_names), axis=1)))
        features.update(zip(vectors.dense_names,
                            tf.unstack(tf.constant(vectors.dense), len(vectors.dense_names), axis=1)))
        features.update((name, tf.RaggedTensor.from_row_splits(tf.constant(r.flat_values), tf.constant(r.row_splits),
                                                               validate=False))
                        for name, r in zip(vectors.ragged_names, vectors.ragged))
        return features

    def __getitem__(self, name: str) -> tf.Tensor:
        return self._tensors[name]

    def __iter__(self):
        return iter(self._vectors.id_names + self._vectors.dense_names + self._vectors.ragged_names)

    def __len__(self) -> int:
        return len(self._vectors.id_names) + len(self._vectors.dense_names) + len(self._vectors.ragged_names)


def _record_default(field_type: int, default: str):
    if field_type in (_FT.INT32, _FT.INT64):
        return tf.constant([int(float(default)) if default else 0], tf.int64)
    if field_type in (_FT.FLOAT, _FT.DOUBLE, _FT.BOOL):
        return tf.constant([float(default) if default else 0.0], tf.float32)
    return tf.constant([default], tf.string)


def ids_of(feature: IdFeature, column: tf.Tensor):
    """int64 ids from a decoded column: hashed strings, or ints passed through.

    Padding values (``feature.padding``) and negative int ids become
    PADDING_ID, which always looks up as zeros; in tag and sequence features they are dropped
    (multi_value_tf.py).
    """
    if feature.multi_value:
        return multi_value_ids(feature, column).ids
    if feature.string_ids:
        ids = tf.strings.to_hash_bucket_fast(column, HASH_BUCKETS)
        for pad in feature.padding:
            ids = tf.where(tf.equal(column, pad), tf.constant(PADDING_ID, tf.int64), ids)
        return ids
    ids = column
    for pad in feature.padding:
        ids = tf.where(tf.equal(ids, int(float(pad))), tf.constant(PADDING_ID, tf.int64), ids)
    return tf.where(ids < 0, tf.constant(PADDING_ID, tf.int64), ids)


def feature_ids(feature: IdFeature, column_of: Callable[[str], tf.Tensor]):
    """The feature's ids from its decoded input columns (``column_of(input name)``): plain, crossed or bucketized."""
    if feature.combo:
        return cross_ids([ids_of(part, column_of(part.input_name)) for part in feature.combo], feature.hash_buckets)
    if feature.boundaries and not feature.multi_value:  # (a sequence of numbers is bucketized value by value)
        return bucketize(column_of(feature.input_name), feature.boundaries)
    return ids_of(feature, column_of(feature.input_name))


def parsed_features(specs: FeatureSpecs, column_of: Callable[[str], tf.Tensor], serving: bool = False):
    """(features by name, {feature name: [B] bool of samples its values reject}, {vector raw feature name:
    (ok, counts, first bad token) [B] each}) from decoded input columns: every id feature's ids (and a weighted
    tag feature's weights, under ``weights_key``), every raw feature as float32 ([B, dim] for a vector). The
    trainer's parser and the export's serving signature both make their features here; ``serving`` refuses a
    bad vector in the graph (an error naming the feature) instead of returning its checks."""
    features, bad, vectors = {}, {}, {}
    for feature in specs.id_features:
        if feature.multi_value and not feature.combo:
            parsed = multi_value_ids(feature, column_of(feature.input_name))
            features[feature.name] = parsed.ids
            if parsed.weights is not None:
                features[weights_key(feature.name)] = parsed.weights
            if parsed.positions is not None:
                features[positions_key(feature.name)] = parsed.positions
            if parsed.bad is not None:
                bad[feature.name] = parsed.bad
        else:
            features[feature.name] = feature_ids(feature, column_of)
    for feature in specs.raw_features:
        if not feature.is_vector:
            features[feature.name] = tf.cast(column_of(feature.input_name), tf.float32)
        elif serving:
            features[feature.name] = checked_vectors(feature, column_of(feature.input_name))
        else:
            read = raw_vectors(feature, column_of(feature.input_name))
            features[feature.name] = read.values
            vectors[feature.name] = (read.ok, read.counts, read.first_bad)
    return features, bad, vectors


def _malformed(feature: IdFeature) -> Tuple[str, str]:
    """(rejection kind, what each value must be) of a tag or sequence feature with a malformed value."""
    item = "a number" if feature.boundaries else "an int64 id" if not feature.string_ids else "an id"
    if feature.raw_width:
        item = f"at most {feature.raw_width} number(s) a position" + (
            f", joined by {feature.multi_separator!r}" if feature.multi_separator else "")
    if feature.weighted:
        return BAD_TAG_WEIGHT, f"id{feature.kv_separator}weight with {item} and a number weight"
    return (BAD_SEQUENCE if feature.sequence else BAD_VALUE), item


def _reason(message: str) -> str:
    """The informative line of a TensorFlow decode error ("Field 3 in record 0 is not a valid int64: x")."""
    lines = [l.strip() for l in message.split("\n") if l.strip()]
    for pattern in (r"Field \d+ in record \d+", r"not a valid|Expect \d+ fields|Quoted field"):
        for line in lines:
            if re.search(pattern, line):
                return line[:200]
    return (lines[0] if lines else message)[:200]


def _field_text(line: bytes, separator: bytes, index: int) -> str:
    """Field ``index`` of a CSV line (quotes honoured), for a rejection's detail; cut to 100 characters."""
    row = next(csv.reader([line.decode("utf-8", "replace")], delimiter=separator.decode()), [])
    return row[index][:100] if index < len(row) else ""


class CsvParser:
    """Parses CSV lines according to FeatureSpecs; safe to call from one thread at a time."""

    def __init__(self, specs: FeatureSpecs):
        self._specs = specs
        self._separator = specs.separator.encode()
        self._num_fields = len(specs.input_fields)
        index = {f.name: i for i, f in enumerate(specs.input_fields)}
        multi_value_inputs = {name for f in specs.id_features for name in f.split_inputs}
        used = sorted({index[name] for f in specs.id_features for name in f.input_names}
                      | {index[f.input_name] for f in specs.raw_features}
                      | {index[name] for name in specs.label_names}
                      | ({index[specs.sample_weight]} if specs.sample_weight else set()))
        self._select_cols = used
        defaults = []
        for i in used:
            field = specs.input_fields[i]
            # Multi-value fields are split after decoding, so they decode as strings.
            field_type = _FT.STRING if field.name in multi_value_inputs else field.field_type
            defaults.append(_record_default(field_type, field.default))
        self._defaults = defaults
        self._position = {i: k for k, i in enumerate(used)}
        self._index = index
        self._decode = tf.function(self._decode_impl, input_signature=[tf.TensorSpec([None], tf.string)],
                                   autograph=False)

    def _decode_impl(self, lines):
        columns = tf.io.decode_csv(lines, self._defaults, field_delim=self._specs.separator,
                                   select_cols=self._select_cols)
        column = lambda name: columns[self._position[self._index[name]]]
        features, bad, vectors = parsed_features(self._specs, column)
        labels = {}
        for name in self._specs.label_names:  # numeric ones as float32 (a string label stays a string)
            value = column(name)
            labels[name] = value if value.dtype == tf.string else tf.cast(value, tf.float32)
        if self._specs.sample_weight:
            labels[SAMPLE_WEIGHT_KEY] = tf.cast(column(self._specs.sample_weight), tf.float32)
        return features, labels, (bad, vectors)

    def parse(self, lines: Sequence[bytes]) -> ParsedBatch:
        """Parses lines (bytes, no trailing newline); empty lines are ignored."""
        good, rejected = [], []
        expected = self._num_fields - 1
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                continue
            if line.count(self._separator) != expected:
                rejected.append((line, rejection(
                    FIELD_COUNT, f"expected {self._num_fields} fields, got {line.count(self._separator) + 1}")))
                continue
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as e:
                rejected.append((line, rejection(INVALID_UTF8, f"byte {e.start} is not UTF-8")))
                continue
            good.append(line)
        batch = self.parse_exact(good)
        batch.rejected = rejected + batch.rejected
        return batch

    def parse_exact(self, lines: List[bytes]) -> ParsedBatch:
        """Decodes lines known to be non-empty (quoted fields allowed); rejects only what fails to decode."""
        rejected = []
        try:
            features, labels, (bad_values, vectors) = self._decode(tf.constant(lines, tf.string))
        except tf.errors.InvalidArgumentError:
            lines, rejected = self._split_bad(lines)
            features, labels, (bad_values, vectors) = self._decode(tf.constant(lines, tf.string))
        bad = self._bad_labels_and_weights(labels, len(lines))
        for i, reason in self._bad_vectors(vectors).items():
            bad.setdefault(i, reason)
        bad.update((i, reason) for i, reason in self._bad_values(features, bad_values, lines).items() if i not in bad)
        if bad:  # rare: decode again without them
            rejected += [(line, bad[i]) for i, line in enumerate(lines) if i in bad]
            lines = [line for i, line in enumerate(lines) if i not in bad]
            features, labels, _ = self._decode(tf.constant(lines, tf.string))
        weights = labels.pop(SAMPLE_WEIGHT_KEY, None)
        first = self._specs.label_names[0]
        return ParsedBatch(features, labels[first], len(lines), rejected, lines, label_dict=labels,
                           sample_weights=weights)

    def _bad_vectors(self, vectors: Mapping[str, tuple]) -> Dict[int, str]:
        """{line index: rejection reason} of the lines whose vector raw feature is not ``dim`` finite numbers."""
        bad: Dict[int, str] = {}
        for feature in self._specs.raw_features:
            if feature.name not in vectors:
                continue
            ok, counts, first_bad = (t.numpy() for t in vectors[feature.name])
            for i in np.flatnonzero(~ok):
                bad.setdefault(int(i), rejection(BAD_VALUE, bad_vector_reason(feature, int(counts[i]), first_bad[i])))
        return bad

    def _bad_labels_and_weights(self, labels: Mapping[str, tf.Tensor], count: int) -> Dict[int, str]:
        """{line index: rejection reason} of the lines whose label does not fit its task's kind (binary: 0
        or 1; regression: finite) or whose sample weight is not a finite number >= 0."""
        bad: Dict[int, str] = {}
        for name in self._specs.label_names:
            kind = self._specs.label_kind(name)
            values = labels[name].numpy()
            if kind is None or values.dtype.kind not in "fiu":
                continue  # no task learns from it
            if kind == "regression":
                wrong, rule = ~np.isfinite(values), "is not a finite number"
            else:
                wrong, rule = (values != 0) & (values != 1), "is not 0 or 1"
            for i in np.flatnonzero(wrong)[:count]:
                bad.setdefault(int(i), rejection(BAD_LABEL, f"label {name} {values[i]:g} {rule}"))
        if SAMPLE_WEIGHT_KEY in labels:
            weights = labels[SAMPLE_WEIGHT_KEY].numpy()
            for i in np.flatnonzero(~(np.isfinite(weights) & (weights >= 0))):
                bad.setdefault(int(i), rejection(
                    BAD_WEIGHT, f"sample_weight {self._specs.sample_weight} {weights[i]:g} is not a finite number >= 0"))
        return bad

    def _bad_values(self, features: Mapping[str, tf.Tensor], bad_values: Mapping[str, tf.Tensor],
                    lines: List[bytes]) -> Dict[int, str]:
        """{line index: rejection reason} of the lines with a malformed value in a tag or sequence feature (a
        weighted tag value not ``id<kv>number``: bad_tag_weight; a sequence value: bad_sequence; a tag of int
        ids: bad_value) or with sequences of one attention of different lengths (bad_sequence)."""
        bad: Dict[int, str] = {}
        for name, flags in bad_values.items():
            feature = next(f for f in self._specs.id_features if f.name == name)
            kind, what = _malformed(feature)
            for i in np.flatnonzero(flags.numpy()):
                text = _field_text(lines[i], self._separator, self._index[feature.input_name])
                bad.setdefault(int(i), rejection(kind, f"{name}: a value of {feature.input_name} is not {what}: "
                                                 f"{text!r}"))
        by_name = {f.name: f for f in self._specs.id_features}
        for names in self._specs.aligned_sequences:
            if len(names) < 2:
                continue
            lengths = [sequence_lengths(by_name[name], features).numpy() for name in names]
            for other, length in zip(names[1:], lengths[1:]):
                for i in np.flatnonzero(length != lengths[0]):
                    bad.setdefault(int(i), rejection(
                        BAD_SEQUENCE, f"{names[0]} has {lengths[0][i]} ids, {other} {length[i]}: the sequences of "
                        "one attention must be as long"))
        return bad

    def _split_bad(self, lines: List[bytes]):
        good, rejected = [], []
        for line in lines:
            try:
                self._decode(tf.constant([line], tf.string))
                good.append(line)
            except tf.errors.InvalidArgumentError as e:
                rejected.append((line, rejection(BAD_VALUE, _reason(e.message))))
        return good, rejected
