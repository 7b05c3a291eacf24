"""Parses a batch of well-formed CSV lines without TensorFlow, for the Kafka reader process.

On two cores every microsecond of parsing is taken from the training step.
``tf.io.decode_csv`` spends ~5 us per 40-field sample making a string per
field. This parser reads the batch's bytes in one pass of compiled code
(``_csv_decoder.c``, built by setup.py: ~0.5 us per sample) or, where no C
compiler was at hand, with numpy (every separator in one pass, ids hashed
straight from the bytes by ``fingerprint``, numbers by array arithmetic;
~5 us). Both give the numbers ``tf.strings.to_hash_bucket_fast`` and
``decode_csv`` give, and neither needs TensorFlow.

It covers the common batch exactly and nothing else: CSV with a one-byte
separator, single-value id features, every line with the right number of
fields, no quotes, ASCII or valid UTF-8, numbers written as plain decimals
(``-12``, ``0.25``, ``.5``; at most 15 digits), numeric label fields that
pass CsvParser's checks (a binary task's label 0 or 1, any other finite, a
sample weight finite and >= 0), and, for numpy, ids of at most 64 bytes. For
any other batch ``parse`` returns None and the batch goes to CsvParser, which
decodes it with TensorFlow and rejects bad lines with their reasons; both
give bit-identical features and labels (tests/integration/test_vector_csv.py).
"""
import dataclasses
import logging
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from easyonline.features.crosses import bucketize_np, cross_ids_np
from easyonline.features.feature_spec import HASH_BUCKETS, PADDING_ID, FeatureSpecs
from easyonline.features.fingerprint import fingerprint64, hash_bucket
from easyonline.features.label_kinds import BINARY, SAMPLE_WEIGHT_KEY
from easyonline.protos import pipeline_pb2

try:
    from easyonline.features import _csv_decoder
except ImportError:  # setup.py builds it; without a C compiler the numpy code below does the same, slower
    _csv_decoder = None

log = logging.getLogger(__name__)
_FT = pipeline_pb2.DataConfig.FieldType
# Column kinds of _csv_decoder.parse: (kind, role) -> its number there.
_NATIVE_KINDS = {("hash", "id"): 1, ("int_id", "id"): 2, ("float", "dense"): 3, ("int", "dense"): 4,
                 ("int", "binary"): 5, ("float", "binary"): 6, ("int", "number"): 7, ("float", "number"): 8,
                 ("int", "weight"): 9, ("float", "weight"): 10}
_MAX_FLOAT_DIGITS = 15  # below 2**53: a decimal's digits are exact in float64
_MAX_INT_DIGITS = 18  # below 2**63
_POW10 = 10.0 ** np.arange(23)
_FLOAT32_HALF_ULP_BITS = np.uint64(1 << 28)  # a float64 exactly between two float32 values
_LOW_29_BITS = np.uint64((1 << 29) - 1)


@dataclasses.dataclass
class VectorBatch:
    """A parsed batch as three arrays, so that it crosses to the trainer as three tensors, not one per feature.

    ``ids`` [size, len(id_names)] int64, ``dense`` [size, len(dense_names)]
    float32, ``labels`` [size, len(label_names)] float32: every label field
    (data_config.label_fields, the first first), then the sample weight
    (named ``SAMPLE_WEIGHT_KEY``) when the config has one.
    """
    id_names: Tuple[str, ...]
    ids: np.ndarray
    dense_names: Tuple[str, ...]
    dense: np.ndarray
    label_names: Tuple[str, ...]
    labels: np.ndarray
    size: int

    @property
    def features(self) -> Dict[str, np.ndarray]:
        """Feature name -> its column, as CsvParser keys them."""
        features = {name: self.ids[:, i] for i, name in enumerate(self.id_names)}
        features.update((name, self.dense[:, i]) for i, name in enumerate(self.dense_names))
        return features

    @property
    def label_columns(self) -> Dict[str, np.ndarray]:
        """Label field name (and ``SAMPLE_WEIGHT_KEY``) -> its column, as CsvParser keys them."""
        return {name: self.labels[:, i] for i, name in enumerate(self.label_names)}


@dataclasses.dataclass(frozen=True)
class _Column:
    feature: str  # feature name (a label's: its field name, or SAMPLE_WEIGHT_KEY)
    index: int  # position in the line
    kind: str  # "hash" | "int_id" | "float" | "int"
    default: bytes
    padding: Tuple[bytes, ...] = ()
    role: str = "id"  # "id" | "dense" (float32 whatever its input type) | a label's check: "binary" | "number"
    # (finite) | "weight" (finite and >= 0)

    @property
    def dense(self) -> bool:
        return self.role == "dense"


def supports(specs: FeatureSpecs, data: pipeline_pb2.DataConfig) -> bool:
    """True when batches of this config can take the array path at all: plain CSV of single-value features
    with numeric labels (every label field and the sample weight become float32 columns)."""
    types = {f.name: f.field_type for f in specs.input_fields}
    numbers = specs.label_names + ((specs.sample_weight,) if specs.sample_weight else ())
    return (data.input_format == pipeline_pb2.DataConfig.CSV and len(specs.separator.encode()) == 1
            and specs.separator not in '"\n\r' and not any(f.multi_value for f in specs.id_features)
            # a vector raw feature (raw_input_dim) is several columns from one field: CsvParser reads it
            and not any(f.is_vector for f in specs.raw_features)
            and len(specs.label_names) >= 1 and all(types[name] != _FT.STRING for name in numbers))


def native_available() -> bool:
    """True when the compiled decoder was built (setup.py; needs a C compiler at install time)."""
    return _csv_decoder is not None


class VectorCsvParser:
    """``parse(lines)`` -> VectorBatch, or None when the batch needs CsvParser. Picklable; no TensorFlow.

    ``native`` None uses the compiled decoder when it was built, False the
    numpy code. In numpy, columns of one kind (hashed ids, ints, floats) are
    handled together, one call per step for the whole batch.
    """

    def __init__(self, specs: FeatureSpecs, native: Optional[bool] = None):
        if native and _csv_decoder is None:
            raise RuntimeError("easyonline.features._csv_decoder was not built (no C compiler when installing?)")
        self.native = _csv_decoder is not None if native is None else native
        self._separator = specs.separator.encode()
        self._num_fields = len(specs.input_fields)
        index = {f.name: i for i, f in enumerate(specs.input_fields)}
        fields = {f.name: f for f in specs.input_fields}
        columns = []
        # Crossed and bucketized features are computed from columns of their inputs after decoding (crosses.py).
        self._derived = any(f.combo or f.boundaries for f in specs.id_features)
        self._id_names = tuple(f.name for f in specs.id_features)
        self._dense_names = tuple(f.name for f in specs.raw_features)
        for feature in specs.id_features:
            if feature.boundaries:
                field = fields[feature.input_name]
                columns.append(_Column(f"{feature.name}/value", index[field.name], _number_kind(field.field_type),
                                       field.default.encode(), role="dense"))
                continue
            for part in feature.combo or (feature,):
                field = fields[part.input_name]
                kind = "hash" if part.string_ids else "int_id"
                columns.append(_Column(part.name, index[field.name], kind, field.default.encode(),
                                       tuple(p.encode() for p in part.padding)))
        for feature in specs.raw_features:
            field = fields[feature.input_name]
            columns.append(_Column(feature.name, index[field.name], _number_kind(field.field_type),
                                   field.default.encode(), role="dense"))
        # Every label field, checked as CsvParser checks it (binary: 0 or 1; any other: finite), then the weight.
        labels = [(name, "binary" if specs.label_kind(name) == BINARY else "number") for name in specs.label_names]
        if specs.sample_weight:
            labels.append((specs.sample_weight, "weight"))
        self._label_columns = tuple(
            _Column(SAMPLE_WEIGHT_KEY if role == "weight" else name, index[name], _number_kind(fields[name].field_type),
                    fields[name].default.encode(), role=role) for name, role in labels)
        self._label_names = tuple(c.feature for c in self._label_columns)
        self._id_columns = tuple(c for c in columns if c.kind in ("hash", "int_id"))
        self._dense_columns = tuple(c for c in columns if c.dense)
        # Where each derived feature reads its inputs, and which decoded dense columns are the model's.
        id_at = {c.feature: i for i, c in enumerate(self._id_columns)}
        dense_at = {c.feature: i for i, c in enumerate(self._dense_columns)}
        self._derivations = tuple(
            ("bucket", dense_at[f"{f.name}/value"], f.boundaries) if f.boundaries else
            ("cross", [id_at[part.name] for part in f.combo], f.hash_buckets) if f.combo else
            ("plain", id_at[f.name], None) for f in specs.id_features)
        self._raw_dense = [dense_at[name] for name in self._dense_names]
        columns.extend(self._label_columns)
        self._groups = {kind: tuple(c for c in columns if c.kind == kind or (kind == "int" and c.kind == "int_id"))
                        for kind in ("hash", "int", "float")}
        hashed = self._groups["hash"]
        # Empty fields take their field's default: the defaults go after the batch's bytes.
        self._defaults_blob = b"".join(c.default for c in hashed)
        self._default_starts = np.cumsum([0] + [len(c.default) for c in hashed[:-1]]).astype(np.int64)
        self._default_lengths = np.array([len(c.default) for c in hashed], np.int64)
        if self.native:
            self._native_columns = tuple(
                _native_column(column, out) for out, column in enumerate(self._id_columns)) + tuple(
                _native_column(column, out) for out, column in enumerate(self._dense_columns)) + tuple(
                _native_column(column, out) for out, column in enumerate(self._label_columns))

    @property
    def id_names(self) -> Tuple[str, ...]:
        """The id features, in the order of a VectorBatch's ``ids`` columns."""
        return self._id_names

    @property
    def dense_names(self) -> Tuple[str, ...]:
        """The numeric features, in the order of a VectorBatch's ``dense`` columns."""
        return self._dense_names

    @property
    def label_names(self) -> Tuple[str, ...]:
        """The label fields (and ``SAMPLE_WEIGHT_KEY``), in the order of a VectorBatch's ``labels`` columns."""
        return self._label_names

    def parse(self, lines: Sequence[bytes]) -> Optional[VectorBatch]:
        """Lines without their newline; empty lines are skipped as CsvParser skips them."""
        if b"" in lines:
            lines = [line for line in lines if line]
        return self.parse_blob(b"\n".join(lines), len(lines)) if lines else None

    def parse_blob(self, blob: bytes, count: int) -> Optional[VectorBatch]:
        """``count`` lines joined by newlines (a caller that already joined them saves a copy).

        A blob with an empty line is declined (every line must have every field), so a caller can try
        it first and look for empty lines, which ``parse`` skips, only when it is declined.
        """
        if not count or b'"' in blob or b"\r" in blob or not _valid_utf8(blob):
            return None
        if self._num_fields == 1 and (blob[:1] == b"\n" or blob[-1:] == b"\n" or b"\n\n" in blob):
            return None  # one field: an empty line would pass for an empty field
        if self.native:
            return self._parse_native(blob, count)
        bounds = self._field_bounds(blob, count)
        if bounds is None:
            return None
        starts, lengths = bounds
        values = {}
        for kind, parse in (("int", _ints), ("float", _floats), ("hash", self._hash_ids)):
            group = self._groups[kind]
            if not group:
                continue
            which = [c.index for c in group]
            defaults = [c.default for c in group]
            parsed = parse(blob, starts[:, which], lengths[:, which], defaults)
            if parsed is None:
                return None
            for i, column in enumerate(group):
                values[column] = parsed[:, i]
        labels = np.empty((count, len(self._label_columns)), np.float32)
        for i, column in enumerate(self._label_columns):
            labels[:, i] = values[column]  # (ints cast to float32 as CsvParser casts them, then checked)
        if not _labels_pass(labels, [c.role for c in self._label_columns]):
            return None
        ids = np.empty((count, len(self._id_columns)), np.int64)
        for i, column in enumerate(self._id_columns):
            ids[:, i] = _int_ids(values[column], column.padding) if column.kind == "int_id" else values[column]
        dense = np.empty((count, len(self._dense_columns)), np.float32)
        for i, column in enumerate(self._dense_columns):
            dense[:, i] = values[column]
        return self._batch(ids, dense, labels, count)

    def _parse_native(self, blob: bytes, count: int) -> Optional[VectorBatch]:
        ids = np.empty((count, len(self._id_columns)), np.int64)
        dense = np.empty((count, len(self._dense_columns)), np.float32)
        labels = np.empty((count, len(self._label_columns)), np.float32)
        if not _csv_decoder.parse(blob, count, self._num_fields, self._separator[0], self._native_columns,
                                  ids, dense, labels):
            return None
        return self._batch(ids, dense, labels, count)

    def _batch(self, ids: np.ndarray, dense: np.ndarray, labels: np.ndarray, count: int) -> VectorBatch:
        """The decoded columns as the model's features: crosses and buckets computed from their inputs' columns."""
        if not self._derived:
            return VectorBatch(self._id_names, ids, self._dense_names, dense, self._label_names, labels, count)
        out = np.empty((count, len(self._derivations)), np.int64)
        for i, (kind, source, parameter) in enumerate(self._derivations):
            if kind == "bucket":
                out[:, i] = bucketize_np(dense[:, source], parameter)
            elif kind == "cross":
                out[:, i] = cross_ids_np([ids[:, j] for j in source], parameter)
            else:
                out[:, i] = ids[:, source]
        return VectorBatch(self._id_names, out, self._dense_names, dense[:, self._raw_dense], self._label_names,
                           labels, count)

    def _field_bounds(self, blob: bytes, count: int) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        """[count, fields] start offsets and lengths, or None unless every line has exactly the fields."""
        data = np.frombuffer(blob, np.uint8)
        separator = self._separator[0]
        delimiters = np.flatnonzero((data == separator) | (data == 10))
        fields = self._num_fields
        if delimiters.size != count * fields - 1:
            return None
        kinds = np.append(data[delimiters], np.uint8(10)).reshape(count, fields)
        if not (np.all(kinds[:, -1] == 10) and np.all(kinds[:, :-1] == separator)):
            return None
        starts = np.concatenate([[0], delimiters + 1]).reshape(count, fields)
        ends = np.append(delimiters, len(blob)).reshape(count, fields)
        return starts, ends - starts

    def _hash_ids(self, blob: bytes, starts: np.ndarray, lengths: np.ndarray, _) -> Optional[np.ndarray]:
        """[count, columns] hashed ids; padding values become PADDING_ID."""
        empty = lengths == 0
        if empty.any():
            blob, offset = blob + self._defaults_blob, len(blob)
            starts = np.where(empty, offset + self._default_starts, starts)
            lengths = np.where(empty, self._default_lengths, lengths)
        fingerprints, too_long = fingerprint64(blob, starts.ravel(), lengths.ravel())
        if too_long.any():
            return None
        ids = hash_bucket(fingerprints, HASH_BUCKETS).reshape(starts.shape)
        for i, column in enumerate(self._groups["hash"]):
            for pad in column.padding:
                ids[:, i] = np.where(_equals(blob, starts[:, i], lengths[:, i], pad), PADDING_ID, ids[:, i])
        return ids


def _native_column(column: _Column, out: int) -> tuple:
    """The (field, kind, out, default_int, default_float, pads) tuple _csv_decoder.parse reads for a column.

    An empty field takes its default, so for hashed ids the default's id
    (padding rules applied) is worked out here, once.
    """
    default = column.default
    if column.kind == "hash":
        default_id = PADDING_ID if default in column.padding else \
            _csv_decoder.fingerprint64(default) % HASH_BUCKETS
        return column.index, _NATIVE_KINDS["hash", "id"], out, default_id, 0.0, column.padding
    default_int = int(float(default)) if default else 0
    pads = tuple(int(float(p)) for p in column.padding) if column.kind == "int_id" else ()
    return (column.index, _NATIVE_KINDS[column.kind, column.role], out, default_int,
            float(default) if default else 0.0, pads)


def _labels_pass(labels: np.ndarray, roles: Sequence[str]) -> bool:
    """CsvParser's checks (``_bad_labels_and_weights``) of float32 label columns: a binary label 0 or 1, any
    other finite, a weight finite and >= 0."""
    for i, role in enumerate(roles):
        column = labels[:, i]
        ok = (column == 0) | (column == 1) if role == "binary" else \
            np.isfinite(column) & (column >= 0) if role == "weight" else np.isfinite(column)
        if not ok.all():
            return False
    return True


def _number_kind(field_type: int) -> str:
    return "int" if field_type in (_FT.INT32, _FT.INT64) else "float"


def _valid_utf8(blob: bytes) -> bool:
    if blob.isascii():
        return True
    try:
        blob.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _int_ids(ids: np.ndarray, padding: Tuple[bytes, ...]) -> np.ndarray:
    """Int ids as ids_of makes them: padding values and negative ids look up as zeros."""
    for pad in padding:
        ids = np.where(ids == int(float(pad)), PADDING_ID, ids)
    return np.where(ids < 0, PADDING_ID, ids)


def _equals(blob: bytes, starts: np.ndarray, lengths: np.ndarray, value: bytes) -> np.ndarray:
    """Which fields are exactly ``value``."""
    same = lengths == len(value)
    if not value or not same.any():
        return same
    candidates = np.flatnonzero(same)
    data = np.frombuffer(blob, np.uint8)
    chars = data[starts[candidates, None] + np.arange(len(value))]
    same[candidates] = np.all(chars == np.frombuffer(value, np.uint8), axis=1)
    return same


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


def _floats(blob: bytes, starts: np.ndarray, lengths: np.ndarray, defaults: Sequence[bytes]) -> Optional[np.ndarray]:
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


def _ints(blob: bytes, starts: np.ndarray, lengths: np.ndarray, defaults: Sequence[bytes]) -> Optional[np.ndarray]:
    present, parsed = _present_decimals(blob, starts, lengths, _MAX_INT_DIGITS, allow_dot=False)
    if parsed is None:
        return None
    mantissa, _, negative = parsed
    out = _defaults(starts.shape, defaults, lambda d: int(float(d)), np.int64)
    out.ravel()[present] = np.where(negative, -mantissa, mantissa)
    return out
