"""Fields of several values in TensorFlow: tags, weighted tags ("id:weight") and behaviour sequences.

The trainer's parser and the export's serving signature both call
``multi_value_ids``, so a sequence id is the same int64 as the id of the
target item feature it shares a table with: strings hashed like an
IdFeature's, ints passed through. Empty values (``a||b``, a trailing
separator) and padding values are dropped; a sequence keeps its first
``max_length`` ids (the most recent, as EasyRec keeps them). Weighted tags
drop ids of weight <= 0, as TensorFlow's safe embedding lookup (EasyRec's)
does, and flag the samples with a value that is not ``id<kv>number``.
"""
from typing import NamedTuple, Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.features.cross_ops import bucketize
from easyonline.features.feature_spec import HASH_BUCKETS, IdFeature

tf = ensure_legacy_keras()

# A finite decimal number, as a weight must be written ("1", "-0.5", ".5", "2e-3").
NUMBER_PATTERN = r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?"


class MultiValueIds(NamedTuple):
    """``ids`` ragged [B, None] int64; ``weights`` ragged [B, None] float32 of a weighted tag feature (None
    otherwise); ``bad`` [B] bool: samples with a malformed weighted value (None when there can be none)."""
    ids: tf.RaggedTensor
    weights: Optional[tf.RaggedTensor] = None
    bad: Optional[tf.Tensor] = None


def _values(feature: IdFeature, column: tf.Tensor) -> tf.RaggedTensor:
    text = tf.strings.as_string(column) if column.dtype != tf.string else column
    values = tf.strings.split(text, sep=feature.separator)
    return tf.ragged.boolean_mask(values, tf.strings.length(values) > 0)


def _not_padding(feature: IdFeature, tokens: tf.Tensor) -> tf.Tensor:
    """[n] bool: which of the (flat) tokens are none of the feature's padding values."""
    keep = tf.ones_like(tokens, tf.bool)
    for pad in feature.padding:
        keep = tf.logical_and(keep, tf.not_equal(tokens, pad))
    return keep


def _ids(feature: IdFeature, tokens: tf.RaggedTensor) -> tf.RaggedTensor:
    """Ids of non-empty, non-padding tokens: hashed strings, ints (negative ones dropped) or buckets."""
    if feature.string_ids:
        return tf.ragged.map_flat_values(tf.strings.to_hash_bucket_fast, tokens, HASH_BUCKETS)
    if feature.boundaries:  # a sequence of numbers (sub_feature_type RawFeature), bucketized
        numbers = tf.ragged.map_flat_values(tf.strings.to_number, tokens, out_type=tf.float32)
        return tf.ragged.map_flat_values(bucketize, numbers, feature.boundaries)
    ids = tf.ragged.map_flat_values(tf.strings.to_number, tokens, out_type=tf.int64)
    return tf.ragged.boolean_mask(ids, ids >= 0)


def multi_value_ids(feature: IdFeature, column: tf.Tensor) -> MultiValueIds:
    """The ids (and weights) of a TagFeature or SequenceFeature from its decoded string column [B]."""
    values = _values(feature, column)
    if not feature.weighted:
        ids = _ids(feature, tf.ragged.boolean_mask(values, values.with_flat_values(
            _not_padding(feature, values.flat_values))))
        if feature.sequence and feature.max_length:
            ids = ids[:, :feature.max_length]
        return MultiValueIds(ids)
    flat = values.flat_values
    pairs = tf.strings.split(flat, sep=feature.kv_separator, maxsplit=1)
    parts = pairs.to_tensor(default_value="", shape=[tf.size(flat), 2])
    id_text, weight_text = parts[:, 0], parts[:, 1]
    well_formed = (pairs.row_lengths() == 2) & (tf.strings.length(id_text) > 0) & \
        tf.strings.regex_full_match(weight_text, NUMBER_PATTERN)
    weights = tf.strings.to_number(tf.where(well_formed, weight_text, "0"), tf.float32)
    keep = well_formed & (weights > 0) & _not_padding(feature, id_text)
    rows = values.value_rowids()
    bad = tf.math.unsorted_segment_max(tf.cast(~well_formed, tf.int32), rows, values.nrows()) > 0
    kept_ids = tf.RaggedTensor.from_value_rowids(tf.boolean_mask(id_text, keep), tf.boolean_mask(rows, keep),
                                                 values.nrows())
    kept_weights = tf.RaggedTensor.from_value_rowids(tf.boolean_mask(weights, keep), tf.boolean_mask(rows, keep),
                                                     values.nrows())
    ids = _ids(feature, kept_ids)
    if not feature.string_ids and not feature.boundaries:  # (negative int ids dropped: their weights too)
        numbers = tf.ragged.map_flat_values(tf.strings.to_number, kept_ids, out_type=tf.int64)
        kept_weights = tf.ragged.boolean_mask(kept_weights, numbers >= 0)
    return MultiValueIds(ids, kept_weights, bad)
