"""The numpy FarmHash Fingerprint64 (features/fingerprint.py) against tf.strings.to_hash_bucket_fast.

Strings are packed into one buffer and hashed as (start, length) slices, as the CSV reader does.
"""
import numpy as np
import pytest

import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.features.feature_spec import HASH_BUCKETS
from easyonline.features.fingerprint import MAX_LENGTH, fingerprint64, hash_bucket

tf = ensure_legacy_keras()

# Every length class of farmhashna::Hash64 (0, 1-3, 4-7, 8-16, 17-32, 33-64) at its edges, and beyond 64.
LENGTHS = (0, 1, 2, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 200)


def _text(n: int, seed: int = 0) -> bytes:
    """n bytes covering the whole byte range (high bits set too): loads must be unsigned, little-endian."""
    return bytes((i * 37 + 7 + seed * 101) % 256 for i in range(n))


def _pack(strings, prefix=b""):
    buffer = prefix + b"".join(strings)
    lengths = np.array([len(s) for s in strings], np.int64)
    starts = len(prefix) + np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return buffer, starts, lengths


def _tf(strings, buckets=HASH_BUCKETS):
    return tf.strings.to_hash_bucket_fast(list(strings), buckets).numpy().tolist()


def test_hash_buckets_is_two_to_the_63_minus_one():
    assert HASH_BUCKETS == 2**63 - 1 and MAX_LENGTH == 64


def test_equals_tensorflow_for_every_length_up_to_64_in_one_batch():
    strings = [_text(n) for n in LENGTHS]
    fingerprints, too_long = fingerprint64(*_pack(strings))
    assert too_long.tolist() == [n > 64 for n in LENGTHS]  # 65 and 200 bytes: left to TensorFlow
    ours = hash_bucket(fingerprints, HASH_BUCKETS).tolist()
    expected = _tf(strings)
    short = [i for i, n in enumerate(LENGTHS) if n <= 64]
    assert [ours[i] for i in short] == [expected[i] for i in short]


@pytest.mark.parametrize("n", [0, 1, 16, 33, 64])
def test_a_batch_of_one_length_class_equals_tensorflow(n):
    # all strings in one class take the vectorized shortcut (no per-class selection)
    strings = [_text(n, seed) for seed in range(4)]
    fingerprints, too_long = fingerprint64(*_pack(strings))
    assert not too_long.any()
    assert hash_bucket(fingerprints, HASH_BUCKETS).tolist() == _tf(strings)
    if n:
        assert len(set(fingerprints.tolist())) == 4  # different strings, different hashes


@pytest.mark.parametrize("n", [65, 200])
def test_longer_strings_are_reported_not_hashed_wrong_silently(n):
    strings = [_text(n), _text(5)]
    _, too_long = fingerprint64(*_pack(strings))
    assert too_long.tolist() == [True, False]
    only_long = fingerprint64(*_pack([_text(n)]))[1]
    assert only_long.tolist() == [True]


def test_slices_anywhere_in_the_buffer_and_at_its_very_end():
    # an odd prefix misaligns every start; the last string ends at the buffer's last byte (loads read past
    # the slice, never past the buffer's padding)
    strings = [b"alice", b"b", b"", b"x" * 64, _text(40), _text(11)]
    fingerprints, _ = fingerprint64(*_pack(strings, prefix=b"abc"))
    assert hash_bucket(fingerprints, HASH_BUCKETS).tolist() == _tf(strings)


def test_the_same_bytes_hash_the_same_wherever_they_are():
    buffer = b"user42,item7,user42"
    fingerprints, _ = fingerprint64(buffer, np.array([0, 7, 13]), np.array([6, 5, 6]))
    assert fingerprints[0] == fingerprints[2] != fingerprints[1]


def test_empty_string_is_k2():
    # farmhash: the empty string hashes to k2 = 0x9ae16a3b2f90404f
    fingerprints, _ = fingerprint64(b"", np.array([0]), np.array([0]))
    assert int(fingerprints[0]) == 0x9ae16a3b2f90404f
    assert hash_bucket(fingerprints, HASH_BUCKETS).tolist() == _tf([b""]) == [0x9ae16a3b2f90404f - (2**63 - 1)]


def test_empty_batch():
    fingerprints, too_long = fingerprint64(b"abc", np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert fingerprints.shape == (0,) and too_long.shape == (0,)


@pytest.mark.parametrize("buckets", [1, 2, 1000, 2**31 - 1])
def test_hash_bucket_is_fingerprint_modulo_buckets_like_tensorflow(buckets):
    strings = [_text(n) for n in (0, 3, 9, 20, 50)]
    fingerprints, _ = fingerprint64(*_pack(strings))
    ids = hash_bucket(fingerprints, buckets)
    assert ids.dtype == np.int64 and ids.tolist() == _tf(strings, buckets)
    assert all(0 <= i < buckets for i in ids.tolist())


def test_the_native_decoders_fingerprint_covers_every_length():
    # strings longer than 64 bytes are hashed by the compiled CSV decoder (or TensorFlow), not by the numpy port
    from easyonline.features import _csv_decoder  # pylint: disable=g-import-not-at-top
    strings = [_text(n) for n in LENGTHS + (1000,)]
    assert [_csv_decoder.fingerprint64(s) % HASH_BUCKETS for s in strings] == _tf(strings)
