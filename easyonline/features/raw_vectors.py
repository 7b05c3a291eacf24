"""Vector raw features (EasyRec's ``raw_input_dim``): ``dim`` numbers joined by the feature's separator.

One function reads them for the trainer's parser and for the export, so both
take the same strings to the same [B, dim] floats. It never fails on a bad
value: it says which samples are bad (another count of numbers, or a token
that is not a finite number), and the caller rejects those samples (the
parser: ``bad_value``, dead-lettered) or the request (serving). An empty value
is ``dim`` zeros, as EasyRec fills a missing vector.
"""
import dataclasses

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.features.feature_spec import RawFeature

tf = ensure_legacy_keras()

# What tf.strings.to_number reads as a number, without nan and inf (which it also reads).
_NUMBER = r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*"


@dataclasses.dataclass
class RawVectors:
    """A batch of one vector feature: ``values`` [B, dim] float32, ``ok`` [B] bool, and for the bad samples'
    reasons ``counts`` [B] (numbers given) and ``first_bad`` [B] (the first token that is not a finite number)."""
    values: tf.Tensor
    ok: tf.Tensor
    counts: tf.Tensor
    first_bad: tf.Tensor


def raw_vectors(feature: RawFeature, column: tf.Tensor) -> RawVectors:
    """``column`` [B] strings read as ``feature.dim`` numbers each (module docstring)."""
    empty = tf.equal(tf.strings.strip(column), "")
    tokens = tf.strings.split(column, sep=feature.separator)
    flat = tokens.flat_values
    numeric = tf.strings.regex_full_match(flat, _NUMBER)
    numbers = tf.strings.to_number(tf.where(numeric, flat, "0"), tf.float32)
    good = tokens.with_flat_values(tf.logical_and(numeric, tf.math.is_finite(numbers)))
    counts = tokens.row_lengths()
    bad_tokens = tf.reduce_sum(tf.cast(tf.logical_not(good), tf.int64), axis=1)
    ok = tf.logical_or(empty, tf.logical_and(tf.equal(counts, feature.dim), tf.equal(bad_tokens, 0)))
    values = tokens.with_flat_values(tf.where(good.flat_values, numbers, 0.0)).to_tensor(0.0, shape=[None, feature.dim])
    first_bad = tf.ragged.boolean_mask(tokens, tf.logical_not(good)).to_tensor("", shape=[None, 1])[:, 0]
    return RawVectors(values, ok, tf.where(empty, tf.zeros_like(counts), counts), first_bad)


def bad_vector_reason(feature: RawFeature, count: int, first_bad: bytes) -> str:
    """Why a sample's vector was refused (after the ``bad_value`` kind)."""
    if count != feature.dim:
        return (f"raw feature {feature.name}: {count} numbers, raw_input_dim is {feature.dim} "
                f"(joined by {feature.separator!r})")
    return f"raw feature {feature.name}: {first_bad.decode('utf-8', 'replace')!r} is not a finite number"


def checked_vectors(feature: RawFeature, column: tf.Tensor) -> tf.Tensor:
    """[B, dim] values for serving: an InvalidArgumentError naming the feature when a sample's value is bad."""
    vectors = raw_vectors(feature, column)
    check = tf.debugging.Assert(tf.reduce_all(vectors.ok), [
        f"raw feature {feature.name} needs {feature.dim} finite numbers joined by {feature.separator!r} "
        "per sample (or an empty value); numbers given per sample:", vectors.counts,
        "first token that is not a finite number, per sample:", vectors.first_bad], summarize=8)
    with tf.control_dependencies([check]):
        return tf.identity(vectors.values)
