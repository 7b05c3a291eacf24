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
separator, single-value id features and the common multi-value ones (tags,
weighted tags and sequences with one-byte separators: multi_value_numpy.py;
their values must be hashed ids or plain decimals, weights plain decimals,
and the sequences of one attention as long as each other), every line with
the right number of fields, no quotes, ASCII or valid UTF-8, numbers written as plain decimals
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

from easyonline.features.cross_ids_numpy import bucketize_np, cross_ids_np
from easyonline.features.feature_spec import HASH_BUCKETS, PADDING_ID, FeatureSpecs
from easyonline.features.fingerprint import fingerprint64, hash_bucket
from easyonline.features.label_kinds import BINARY, SAMPLE_WEIGHT_KEY
from easyonline.features.plain_decimals import floats, ints
from easyonline.features.multi_value_numpy import (MultiColumn, RaggedArray, aligned_positions, lengths_align,
                                                     multi_value_refusal, parse_numpy)
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


@dataclasses.dataclass
class VectorBatch:
    """A parsed batch as three arrays (and two per multi-value feature), so that it crosses to the trainer as a
    few tensors, not one per feature.

    ``ids`` [size, len(id_names)] int64, ``dense`` [size, len(dense_names)]
    float32, ``labels`` [size, len(label_names)] float32: every label field
    (data_config.label_fields, the first first), then the sample weight
    (named ``SAMPLE_WEIGHT_KEY``) when the config has one. ``ragged``: the
    multi-value features' ids (int64) and weighted tags' weights (float32,
    under ``weights_key``), by ``ragged_names``, as CsvParser's ragged
    tensors hold them.
    """
    id_names: Tuple[str, ...]
    ids: np.ndarray
    dense_names: Tuple[str, ...]
    dense: np.ndarray
    label_names: Tuple[str, ...]
    labels: np.ndarray
    size: int
    ragged_names: Tuple[str, ...] = ()
    ragged: Tuple[RaggedArray, ...] = ()

    @property
    def features(self) -> Dict[str, object]:
        """Feature name -> its column (a multi-value one's: a RaggedArray), as CsvParser keys them."""
        features: Dict[str, object] = {name: self.ids[:, i] for i, name in enumerate(self.id_names)}
        features.update((name, self.dense[:, i]) for i, name in enumerate(self.dense_names))
        features.update(zip(self.ragged_names, self.ragged))
        return features

    def owned(self) -> "VectorBatch":
        """A copy whose arrays are its own (these may be views of a shared-memory slot about to be reused)."""
        return dataclasses.replace(self, ids=np.array(self.ids), dense=np.array(self.dense),
                                   labels=np.array(self.labels),
                                   ragged=tuple(RaggedArray(np.array(r.flat_values), np.array(r.row_splits))
                                                for r in self.ragged))

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


def array_path_refusal(specs: FeatureSpecs, data: pipeline_pb2.DataConfig) -> str:
    """Why batches of this config cannot take the array path ("" when they can: plain CSV of single-value
    features and of the multi-value forms ``multi_value_refusal`` takes, with numeric labels; every label field
    and the sample weight become float32 columns). The trainer logs it at start."""
    types = {f.name: f.field_type for f in specs.input_fields}
    numbers = specs.label_names + ((specs.sample_weight,) if specs.sample_weight else ())
    vectors = [f.name for f in specs.raw_features if f.is_vector]  # several columns from one field
    if data.input_format != pipeline_pb2.DataConfig.CSV:
        return f"input_format {pipeline_pb2.DataConfig.InputFormat.Name(data.input_format)} is not CSV"
    if len(specs.separator.encode()) != 1 or specs.separator in '"\n\r':
        return f"data_config.separator {specs.separator!r} is not one plain byte"
    if vectors:
        return f"{vectors[0]} is a vector raw feature (raw_input_dim)"
    if not specs.label_names:
        return "no label field"
    strings = [name for name in numbers if types[name] == _FT.STRING]
    if strings:
        return f"label or weight field {strings[0]!r} is a STRING"
    return multi_value_refusal(specs)


def supports(specs: FeatureSpecs, data: pipeline_pb2.DataConfig) -> bool:
    """True when batches of this config can take the array path at all (``array_path_refusal``)."""
    return not array_path_refusal(specs, data)


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
        # Crossed and bucketized features are computed from columns of their inputs after decoding (cross_ids_numpy.py).
        single = [f for f in specs.id_features if not f.multi_value]
        self._derived = any(f.combo or f.boundaries for f in single)
        self._id_names = tuple(f.name for f in single)
        # Multi-value features (tags, sequences) become ragged arrays, in id_features order.
        self._multi = tuple(MultiColumn.of(f, index[f.input_name], fields[f.input_name].default)
                            for f in specs.id_features if f.multi_value)
        self._ragged_outputs = tuple(output for column in self._multi for output in column.outputs)
        self._aligned = aligned_positions(specs, self.ragged_names)
        self._dense_names = tuple(f.name for f in specs.raw_features)
        for feature in single:
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
            ("plain", id_at[f.name], None) for f in single)
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

    @property
    def ragged_names(self) -> Tuple[str, ...]:
        """The multi-value features' ids and weights keys, in the order of a VectorBatch's ``ragged``."""
        return tuple(name for name, _ in self._ragged_outputs)

    @property
    def ragged_dtypes(self) -> Tuple[type, ...]:
        """The dtype of each of ``ragged_names``' values: int64 ids, float32 weights."""
        return tuple(dtype for _, dtype in self._ragged_outputs)

    @property
    def ragged_row_bytes(self) -> int:
        """About how many bytes of ragged values a row has (a sequence's bound, or 8 values), to size slots."""
        return sum(8 + np.dtype(dtype).itemsize * (column.max_length or 8)
                   for column in self._multi for _, dtype in column.outputs)

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
        ragged = []
        for multi in self._multi:
            parsed_multi = parse_numpy(multi, blob, starts[:, multi.index], lengths[:, multi.index])
            if parsed_multi is None:
                return None
            ragged.extend(parsed_multi)
        values = {}
        for kind, parse in (("int", ints), ("float", floats), ("hash", self._hash_ids)):
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
        return self._batch(ids, dense, labels, count, tuple(ragged))

    def _parse_native(self, blob: bytes, count: int) -> Optional[VectorBatch]:
        ids = np.empty((count, len(self._id_columns)), np.int64)
        dense = np.empty((count, len(self._dense_columns)), np.float32)
        labels = np.empty((count, len(self._label_columns)), np.float32)
        buffers, multi = [], []
        for column in self._multi:  # room for every value the batch can hold; splits[-1] says how many it has
            capacity = column.capacity(len(blob), count)
            values = np.empty(capacity, np.int64)
            splits = np.empty(count + 1, np.int64)
            weights = np.empty(capacity, np.float32) if column.kv_separator else None
            buffers.append((values, splits, weights))
            multi.append(column.native(values, splits, weights))
        if not _csv_decoder.parse(blob, count, self._num_fields, self._separator[0], self._native_columns,
                                  ids, dense, labels, tuple(multi)):
            return None
        ragged = []
        for values, splits, weights in buffers:
            ragged.append(RaggedArray(values[:splits[-1]], splits))
            if weights is not None:
                ragged.append(RaggedArray(weights[:splits[-1]], splits))
        return self._batch(ids, dense, labels, count, tuple(ragged))

    def _batch(self, ids: np.ndarray, dense: np.ndarray, labels: np.ndarray, count: int,
               ragged: Tuple[RaggedArray, ...]) -> Optional[VectorBatch]:
        """The decoded columns as the model's features: crosses and buckets computed from their inputs' columns;
        None when the sequences of one attention differ in length (CsvParser rejects those lines)."""
        if not lengths_align(ragged, self._aligned):
            return None
        names = self.ragged_names
        if not self._derived:
            return VectorBatch(self._id_names, ids, self._dense_names, dense, self._label_names, labels, count,
                               names, ragged)
        out = np.empty((count, len(self._derivations)), np.int64)
        for i, (kind, source, parameter) in enumerate(self._derivations):
            if kind == "bucket":
                out[:, i] = bucketize_np(dense[:, source], parameter)
            elif kind == "cross":
                out[:, i] = cross_ids_np([ids[:, j] for j in source], parameter)
            else:
                out[:, i] = ids[:, source]
        return VectorBatch(self._id_names, out, self._dense_names, dense[:, self._raw_dense], self._label_names,
                           labels, count, names, ragged)

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
