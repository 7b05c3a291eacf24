"""Fields of several values in TensorFlow: tags, weighted tags ("id:weight") and behaviour sequences.

The trainer's parser and the export's serving signature both call
``multi_value_ids``, so a sequence id is the same int64 as the id of the
target item feature it shares a table with: strings hashed like an
IdFeature's, ints passed through. Empty values (``a||b``, a trailing
separator) and padding values are dropped; a sequence keeps its first
``max_length`` ids (the most recent, as EasyRec keeps them). Weighted tags
drop ids of weight <= 0, as TensorFlow's safe embedding lookup (EasyRec's)
does. Samples with a value that is not ``id<kv>number`` (weighted tags), not
an int64 id (tags and sequences of int ids) or not a number (sequences of
bucketized numbers) are flagged in ``bad``, so the trainer's parser rejects
that sample alone with a reason naming the feature; the malformed value is
dropped, never converted (a conversion error would fail the whole batch).
A sequence of several values a position (``seq_multi_sep``), or of numbers
fed as numbers, keeps its ids flat, with each id's position beside them
(``positions``).
"""
from typing import List, NamedTuple, Optional, Sequence, Tuple

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.features.cross_ids_tf import bucketize
from easyonline.features.feature_spec import HASH_BUCKETS, IdFeature, positions_key

tf = ensure_legacy_keras()

# A finite decimal number, as a weight must be written ("1", "-0.5", ".5", "2e-3").
NUMBER_PATTERN = r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?"
# An int64 id as TensorFlow's string-to-int64 conversion reads it (no "+", no decimal point); its range is
# checked apart (_int_ids).
INT_PATTERN = r"-?[0-9]+"
_INT64_MAX_HEAD, _INT64_MAX_LAST = 922337203685477580, 7  # 9223372036854775807 = head * 10 + last


class MultiValueIds(NamedTuple):
    """``ids`` ragged [B, None] int64; ``weights`` ragged [B, None] float32 of a weighted tag feature (None
    otherwise); ``bad`` [B] bool: samples with a malformed value (module docstring); ``positions`` ragged
    [B, None] int64, each id's position in its sample's sequence, of a sequence with several values a position
    (None otherwise)."""
    ids: tf.RaggedTensor
    weights: Optional[tf.RaggedTensor] = None
    bad: Optional[tf.Tensor] = None
    positions: Optional[tf.RaggedTensor] = None


def _kept(values: tf.RaggedTensor, keep: tf.Tensor) -> tf.RaggedTensor:
    """``values`` [B, None] with only its flat values where ``keep`` ([n] bool, one per flat value), in order, each
    in its row: tf.ragged.boolean_mask's answer for a mask of the same rows, in a few ops (its general graph is
    over a hundred ops a call, traced into every parser and serving graph)."""
    kept_before = tf.concat([tf.zeros([1], tf.int64), tf.cumsum(tf.cast(keep, tf.int64))], 0)
    return tf.RaggedTensor.from_row_splits(tf.boolean_mask(values.flat_values, keep),
                                           tf.gather(kept_before, values.row_splits), validate=False)


def _values(feature: IdFeature, column: tf.Tensor) -> tf.RaggedTensor:
    text = tf.strings.as_string(column) if column.dtype != tf.string else column
    values = tf.strings.split(text, sep=feature.separator)
    return _kept(values, tf.strings.length(values.flat_values) > 0)


def _not_padding(feature: IdFeature, tokens: tf.Tensor) -> tf.Tensor:
    """[n] bool: which of the (flat) tokens are none of the feature's padding values."""
    keep = tf.ones_like(tokens, tf.bool)
    for pad in feature.padding:
        keep = tf.logical_and(keep, tf.not_equal(tokens, pad))
    return keep


def _well_formed(feature: IdFeature, tokens: tf.Tensor) -> tf.Tensor:
    """[n] bool: which of the (flat, non-empty) tokens the feature's ids can be made of."""
    if feature.string_ids:
        return tf.ones_like(tokens, tf.bool)
    if feature.boundaries:
        return tf.strings.regex_full_match(tokens, NUMBER_PATTERN)
    written = tf.strings.regex_full_match(tokens, INT_PATTERN)
    digits = tf.strings.regex_replace(tokens, r"^-?0*", "")  # (int64's range holds every 18-digit number)
    length = tf.strings.length(digits)
    longest = written & (length == 19)
    nineteen = tf.where(longest, digits, "0" * 19)
    head = tf.strings.to_number(tf.strings.substr(nineteen, 0, 18), tf.int64)
    last = tf.strings.to_number(tf.strings.substr(nineteen, 18, 1), tf.int64)
    negative = tf.cast(tf.strings.regex_full_match(tokens, "-.*"), tf.int64)  # (down to -9223372036854775808)
    in_range = (length < 19) | (longest & ((head < _INT64_MAX_HEAD) | (
        (head == _INT64_MAX_HEAD) & (last <= _INT64_MAX_LAST + negative))))
    return written & in_range


def _ids(feature: IdFeature, tokens: tf.RaggedTensor) -> tf.RaggedTensor:
    """Ids of non-empty, non-padding, well-formed tokens: hashed strings, ints (negative ones dropped) or
    buckets."""
    if feature.string_ids:
        return tf.ragged.map_flat_values(tf.strings.to_hash_bucket_fast, tokens, HASH_BUCKETS)
    if feature.boundaries:  # a sequence of numbers (sub_feature_type RawFeature), bucketized
        numbers = tf.ragged.map_flat_values(tf.strings.to_number, tokens, out_type=tf.float32)
        return tf.ragged.map_flat_values(bucketize, numbers, feature.boundaries)
    ids = tf.ragged.map_flat_values(tf.strings.to_number, tokens, out_type=tf.int64)
    return _kept(ids, ids.flat_values >= 0)


def _rows_with(flags: tf.Tensor, values: tf.RaggedTensor) -> tf.Tensor:
    """[B] bool: the rows of ``values`` where one of the flat ``flags`` is true."""
    return tf.math.unsorted_segment_max(tf.cast(flags, tf.int32), values.value_rowids(), values.nrows()) > 0


def sequence_lengths(feature: IdFeature, features) -> tf.Tensor:
    """[B] int64: the positions of each sample's sequence ``feature`` in parsed ``features``."""
    if not feature.positioned:
        return features[feature.name].row_lengths()
    positions = features[positions_key(feature.name)]
    last = tf.math.unsorted_segment_max(positions.flat_values, positions.value_rowids(), positions.nrows())
    return tf.maximum(last + 1, 0)  # (an empty row's maximum is int64's lowest)


def _split_positions(feature: IdFeature, column: tf.Tensor) -> Tuple[tf.RaggedTensor, tf.RaggedTensor]:
    """(positions [B, P] texts, their values [sum P, M] texts): each position split on ``multi_separator``
    (or one value a position without one); empty texts dropped."""
    positions = _values(feature, column)
    if not feature.multi_separator:
        return positions, tf.RaggedTensor.from_row_lengths(positions.flat_values,
                                                           tf.ones([tf.size(positions.flat_values)], tf.int64))
    values = tf.strings.split(positions.flat_values, sep=feature.multi_separator)
    return positions, _kept(values, tf.strings.length(values.flat_values) > 0)


def _flat_by_position(feature: IdFeature, positions: tf.RaggedTensor, kept: tf.Tensor,
                      parts: Sequence[tf.RaggedTensor]) -> Tuple[List[tf.RaggedTensor], tf.RaggedTensor]:
    """The ``kept`` positions' values (each of ``parts``: [sum P, m], alike in shape) flat per sample [B, n],
    the first ``max_length`` positions of each sample; and each value's position in its sample [B, n]."""
    rows = tf.boolean_mask(positions.value_rowids(), kept)
    nested = [tf.RaggedTensor.from_value_rowids(tf.ragged.boolean_mask(part, kept), rows, positions.nrows())
              for part in parts]
    if feature.max_length:
        nested = [n[:, :feature.max_length] for n in nested]  # [B, L, m]
    position_of_value = nested[0].values.value_rowids()  # (over every sample's kept positions)
    first_position = tf.gather(nested[0].row_splits, tf.gather(nested[0].value_rowids(), position_of_value))
    flat = [n.merge_dims(1, 2) for n in nested]
    return flat, flat[0].with_flat_values(position_of_value - first_position)


def _positioned_ids(feature: IdFeature, column: tf.Tensor) -> MultiValueIds:
    """A sequence of several values a position: each position split on ``multi_separator``; its empty,
    padding and malformed values dropped, then the positions left without a value; the first ``max_length``
    positions kept. The ids come flat per sample, with each one's position."""
    positions, values = _split_positions(feature, column)
    well_formed = _well_formed(feature, values.flat_values)
    ids = _ids(feature, _kept(values, well_formed & _not_padding(feature, values.flat_values)))  # [sum P, m]
    (flat,), where = _flat_by_position(feature, positions, ids.row_lengths() > 0, [ids])
    bad = _rows_with(_rows_with(~well_formed, values), positions)  # (a position's, then its sample's)
    return MultiValueIds(flat, bad=None if feature.string_ids else bad, positions=where)


def _raw_positions(feature: IdFeature, column: tf.Tensor) -> MultiValueIds:
    """A sequence of numbers fed as numbers: each position up to ``raw_width`` numbers (split on
    ``multi_separator`` when it has one; fewer are the first columns, the others 0, as EasyRec fills them); its
    ids are the columns 0 .. raw_width - 1 and its weights the numbers. A position without a number is dropped
    (as an empty value is); one with a token that is not a finite number, or more than raw_width of them, is
    dropped and its sample flagged bad."""
    positions, values = _split_positions(feature, column)
    written = tf.strings.regex_full_match(values.flat_values, NUMBER_PATTERN)
    read = tf.strings.to_number(tf.where(written, values.flat_values, "0"))
    well_formed = written & tf.math.is_finite(read)  # ("1e400" is written as a number, and is inf in float32)
    numbers = values.with_flat_values(read)
    position_bad = _rows_with(~well_formed, values) | (values.row_lengths() > feature.raw_width)
    columns = tf.ragged.range(values.row_lengths())
    kept = ~position_bad & (values.row_lengths() > 0)
    (weights, ids), where = _flat_by_position(feature, positions, kept, [numbers, columns])
    return MultiValueIds(ids, weights, _rows_with(position_bad, positions), where)


def multi_value_ids(feature: IdFeature, column: tf.Tensor) -> MultiValueIds:
    """The ids (and weights, or positions) of a TagFeature or SequenceFeature from its decoded string column
    [B]."""
    if feature.raw_width:
        return _raw_positions(feature, column)
    if feature.multi_separator:
        return _positioned_ids(feature, column)
    values = _values(feature, column)
    if not feature.weighted:
        well_formed = _well_formed(feature, values.flat_values)
        ids = _ids(feature, _kept(values, well_formed & _not_padding(feature, values.flat_values)))
        if feature.sequence and feature.max_length:
            ids = ids[:, :feature.max_length]
        return MultiValueIds(ids, bad=None if feature.string_ids else _rows_with(~well_formed, values))
    flat = values.flat_values
    pairs = tf.strings.split(flat, sep=feature.kv_separator, maxsplit=1)
    parts = pairs.to_tensor(default_value="", shape=[tf.size(flat), 2])
    id_text, weight_text = parts[:, 0], parts[:, 1]
    well_formed = (pairs.row_lengths() == 2) & (tf.strings.length(id_text) > 0) & \
        tf.strings.regex_full_match(weight_text, NUMBER_PATTERN) & _well_formed(feature, id_text)
    weights = tf.strings.to_number(tf.where(well_formed, weight_text, "0"), tf.float32)
    keep = well_formed & (weights > 0) & _not_padding(feature, id_text)
    rows = values.value_rowids()
    bad = _rows_with(~well_formed, values)
    kept_ids = tf.RaggedTensor.from_value_rowids(tf.boolean_mask(id_text, keep), tf.boolean_mask(rows, keep),
                                                 values.nrows())
    kept_weights = tf.RaggedTensor.from_value_rowids(tf.boolean_mask(weights, keep), tf.boolean_mask(rows, keep),
                                                     values.nrows())
    ids = _ids(feature, kept_ids)
    if not feature.string_ids and not feature.boundaries:  # (negative int ids dropped: their weights too)
        numbers = tf.ragged.map_flat_values(tf.strings.to_number, kept_ids, out_type=tf.int64)
        kept_weights = _kept(kept_weights, numbers.flat_values >= 0)
    return MultiValueIds(ids, kept_weights, bad)
