"""The array path (VectorCsvParser, compiled and numpy) parses tags, weighted tags and sequences exactly as
CsvParser does, or declines the batch, which CsvParser then parses, rejecting just the bad lines.

Configs are generated (a seed picks, per multi-value field, a TagFeature plain or weighted, of string or int
ids, or a SequenceFeature of string ids, int ids or bucketized numbers, its separators, padding values,
sequence_length and default), plus a fixed one holding every kind and a target attention whose sequences
must be as long as each other. Lines are generated from adversarial pieces: empty fields and values,
separators leading, trailing and doubled, padding values, non-ASCII, ids over 64 bytes, sequences longer
than their sequence_length, malformed weights ("a:x", "a:", ":1", "a:1:2", "1e3"), ints that are not ints.
Whenever a backend accepts a batch its ids, row splits and weights must equal CsvParser's bit for bit and
CsvParser must have rejected nothing.
"""
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from easyonline.config import parse_pipeline_config
from easyonline.core.rejections import BAD_SEQUENCE, BAD_TAG_WEIGHT, BAD_VALUE, rejection_kind
from easyonline.features import build_feature_specs
from easyonline.features.csv_parser import CsvParser, ParsedBatch
from easyonline.features.vector_csv import VectorCsvParser, native_available, supports

import tensorflow as tf

KINDS = ("tag", "tag_int", "wtag", "wtag_int", "seq", "seq_int", "seq_bucket")
_SEPARATORS, _KV = "|;#/ ", ":="


def _field_config(name: str, kind: str, rng: random.Random) -> str:
    """A feature_configs entry of ``kind`` on field ``name``, with random separators, padding and length."""
    separator = rng.choice(_SEPARATORS)
    parts = [f'input_names: "{name}" embedding_dim: 2 separator: "{separator}"']
    if kind.startswith("wtag"):
        parts.append(f'feature_type: TagFeature kv_separator: "{rng.choice(_KV)}"')
    elif kind.startswith("tag"):
        parts.append("feature_type: TagFeature")
    else:
        parts.append("feature_type: SequenceFeature")
        length = rng.choice([0, 1, 3, 20])
        if length:
            parts.append(f"{rng.choice(['sequence_length', 'max_seq_len'])}: {length}")
        if kind == "seq_bucket":
            parts.append("sub_feature_type: RawFeature boundaries: [-1, 0, 0.5, 10]")
    if rng.random() < 0.5 and kind != "seq_bucket":
        parts.append(f'padding: "{rng.choice(["-1", "none", "0", "é"])}"')
    return "feature_configs { " + " ".join(parts) + " }"


def _config_text(kinds, rng: random.Random, aligned: bool = False) -> str:
    fields = ['input_fields { input_name: "label" input_type: INT32 }',
              'input_fields { input_name: "price" input_type: FLOAT default_val: "0.5" }',
              'input_fields { input_name: "user" input_type: STRING }']
    features = ['feature_configs { input_names: "price" feature_type: RawFeature }',
                'feature_configs { input_names: "user" embedding_dim: 2 padding: "-" }']
    for i, kind in enumerate(kinds):
        int_ids = kind.endswith("_int")
        default = rng.choice(["", "", "7", "a|b"]) if not int_ids else rng.choice(["", "3"])
        fields.append(f'input_fields {{ input_name: "m{i}" input_type: {"INT64" if int_ids else "STRING"} '
                      f'default_val: "{default}" }}')
        features.append(_field_config(f"m{i}", kind, rng))
    groups = ""
    if aligned:  # the first two fields are sequences of one target attention
        groups = ('model_config { model_class: "DIN" din { dnn { hidden_units: [4] } } feature_groups { '
                  'group_name: "g" feature_names: "user" sequence_features { group_name: "din" seq_att_map { '
                  'key: ["user", "user"] hist_seq: ["m0", "m1"] } } } }')
    return (f'model_dir: "/tmp/unused" file_train_input {{ paths: "unused" }} data_config {{ {" ".join(fields)} '
            f'label_fields: "label" separator: "," }} {" ".join(features)} {groups}')


class Setup:
    """A config, its kinds by field, and the three parsers."""

    def __init__(self, kinds, seed: int, aligned: bool = False):
        self.rng = random.Random(seed)
        self.kinds = tuple(kinds)
        self.config = parse_pipeline_config(_config_text(self.kinds, self.rng, aligned))
        self.specs = build_feature_specs(self.config)
        self.features = {f.input_name: f for f in self.specs.id_features if f.multi_value}
        self.csv = CsvParser(self.specs)
        self.parsers = {"compiled": VectorCsvParser(self.specs, native=native_available() or None),
                        "numpy": VectorCsvParser(self.specs, native=False)}


def _random_kinds(seed: int):
    rng = random.Random(seed)
    return [rng.choice(KINDS) for _ in range(rng.randint(1, 5))]


SETUPS = [Setup(KINDS, 0), Setup(("seq", "seq", "wtag"), 1, aligned=True)] + \
    [Setup(_random_kinds(seed), seed) for seed in (2, 3, 4)]
BACKENDS = pytest.mark.parametrize("backend", ["compiled", "numpy"])

_text = st.text(alphabet="abz_-09é:=|;#/ .", max_size=8)
_id = st.one_of(_text, st.sampled_from(["", "a", "b", "none", "-", "é", "0", "-1", "7", "x" * 70, "y" * 200]))
_int = st.one_of(st.integers(-50, 10**6).map(str),
                 st.sampled_from(["", "0", "-0", "-1", "3", "007", "1.5", "x", "1e3", "+4", "99999999999999999999"]))
_decimal = st.one_of(st.floats(-20, 20, allow_nan=False).map(lambda v: repr(round(v, 3))),
                     st.sampled_from(["0", "-0", ".5", "5.", "-.25", "10", "0.5", "1e3", "x", "", "-", "nan"]))
_weight = st.one_of(st.floats(-2, 5, allow_nan=False).map(lambda v: repr(round(v, 2))),
                    st.sampled_from(["1", "0", "-0", "-1", ".5", "2.", "x", "", "1:2", "1e3", "+1", "inf", "nan"]))


@st.composite
def _value(draw, kind: str, kv: str) -> str:
    ids = _int if kind.endswith("_int") else _decimal if kind == "seq_bucket" else _id
    if not kind.startswith("wtag"):
        return draw(ids)
    form = draw(st.integers(0, 9))
    if form == 0:
        return draw(ids)  # no kv separator
    if form == 1:
        return kv + draw(_weight)  # ":1": no id
    return draw(ids) + kv + draw(_weight)


@st.composite
def _field(draw, setup: Setup, name: str) -> str:
    feature = setup.features[name]
    kind = setup.kinds[int(name[1:])]
    if draw(st.integers(0, 9)) == 0:
        return ""  # the field's default
    values = draw(st.lists(_value(kind, feature.kv_separator), max_size=draw(st.sampled_from([3, 8, 30]))))
    text = feature.separator.join(values)
    shape = draw(st.integers(0, 5))
    if shape == 1:
        text = feature.separator + text
    elif shape == 2:
        text += feature.separator
    elif shape == 3:
        text = text.replace(feature.separator, feature.separator * 2)
    return text


@st.composite
def _lines(draw, setup: Setup):
    rows = []
    for _ in range(draw(st.integers(1, 20))):
        fields = [draw(st.sampled_from(["0", "1"])), draw(st.sampled_from(["1.5", "", "-2"])), draw(_id.filter(
            lambda s: "," not in s))]
        fields += [draw(_field(setup, f"m{i}")) for i in range(len(setup.kinds))]
        rows.append(",".join(fields).encode())
    return rows


def _assert_same(vector, parsed) -> None:
    """Every feature CsvParser makes, with the same keys, dtypes, row splits and values, bit for bit."""
    assert vector.size == parsed.size
    got = vector.features
    assert set(got) == set(parsed.features)
    for name, expected in parsed.features.items():
        if isinstance(expected, tf.RaggedTensor):
            values, splits = got[name]
            assert values.dtype == expected.flat_values.dtype, name
            assert splits.tobytes() == expected.row_splits.numpy().tobytes(), (name, splits, expected.row_splits)
            assert values.tobytes() == expected.flat_values.numpy().tobytes(), (name, values, expected)
        else:
            assert got[name].tobytes() == expected.numpy().tobytes(), name


def test_every_setup_takes_the_array_path():
    for setup in SETUPS:
        assert supports(setup.specs, setup.config.data_config), setup.kinds
    assert {kind for setup in SETUPS for kind in setup.kinds} == set(KINDS)


@BACKENDS
@pytest.mark.parametrize("which", range(len(SETUPS)))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_equals_csv_parser_or_declines(backend, which, data):
    setup = SETUPS[which]
    lines = data.draw(_lines(setup))
    parsed = setup.csv.parse(lines)
    vector = setup.parsers[backend].parse(lines)
    if vector is None:
        return
    assert not parsed.rejected, f"{backend} accepted a batch CsvParser rejects lines of: {parsed.rejected}"
    _assert_same(vector, parsed)


# --- the fixed config: every kind, fields in KINDS order --------------------------------------------------

MIXED = SETUPS[0]


def _line(*multi: str, user: str = "u") -> bytes:
    return ",".join(["1", "0.25", user] + list(multi)).encode()


def _mixed_field(kind: str, values) -> str:
    return MIXED.features[f"m{KINDS.index(kind)}"].separator.join(values)


def _mixed_line(**fields: str) -> bytes:
    """A line of the mixed config with ordinary values, ``fields`` (kind -> field text) replacing some."""
    kv = {kind: MIXED.features[f"m{KINDS.index(kind)}"].kv_separator for kind in KINDS}
    ordinary = {"tag": _mixed_field("tag", ["a", "b"]), "tag_int": _mixed_field("tag_int", ["4", "5"]),
                "wtag": _mixed_field("wtag", [f"a{kv['wtag']}0.5", f"b{kv['wtag']}2"]),
                "wtag_int": _mixed_field("wtag_int", [f"3{kv['wtag_int']}1.5"]),
                "seq": _mixed_field("seq", ["s1", "s2", "s3"]), "seq_int": _mixed_field("seq_int", ["1", "2"]),
                "seq_bucket": _mixed_field("seq_bucket", ["0.7", "-3", "12"])}
    ordinary.update(fields)
    return _line(*(ordinary[kind] for kind in KINDS))


@BACKENDS
def test_takes_ordinary_and_odd_but_valid_batches(backend):
    """Declining is always safe, so check that what CsvParser reads without rejecting is taken."""
    seq_sep = MIXED.features[f"m{KINDS.index('seq')}"].separator
    long_seq = seq_sep.join(f"s{i}" for i in range(50))  # longer than any sequence_length
    no_values = _mixed_field("wtag", ["", ""])  # (an empty field would take its default)
    lines = [_mixed_line(), _mixed_line(seq=long_seq), _mixed_line(seq="", tag="", wtag=no_values),  # defaults
             _mixed_line(seq=seq_sep + "é" + seq_sep * 2 + "ü" + seq_sep),  # leading, doubled, trailing
             _mixed_line(tag_int=_mixed_field("tag_int", ["-4", "0", "007"])),  # a negative id dropped
             _mixed_line(seq_bucket=_mixed_field("seq_bucket", ["-1", "0", ".5", "10", "5."]))]
    vector = MIXED.parsers[backend].parse(lines)
    parsed = MIXED.csv.parse(lines)
    assert not parsed.rejected and vector is not None
    _assert_same(vector, parsed)
    seq = vector.features[f"m{KINDS.index('seq')}"]
    length = MIXED.features[f"m{KINDS.index('seq')}"].max_length
    expected_long = min(50, length) if length else 50
    assert seq.row_lengths()[1] == expected_long  # cut to the first sequence_length ids
    assert seq.flat_values[seq.row_splits[1]] == tf.strings.to_hash_bucket_fast("s0", 2**63 - 1).numpy()


def test_a_very_long_field_of_short_ids_is_taken_by_both_and_long_ids_by_the_compiled_decoder():
    tag_sep = MIXED.features[f"m{KINDS.index('tag')}"].separator
    many = [_mixed_line(tag=tag_sep.join(f"t{i}" for i in range(5000)))]
    long_ids = [_mixed_line(tag=tag_sep.join(["z" * 65, "w" * 1000]))]
    for backend, parser in MIXED.parsers.items():
        _assert_same(parser.parse(many), MIXED.csv.parse(many))
    assert MIXED.parsers["numpy"].parse(long_ids) is None  # its hash covers up to 64 bytes
    _assert_same(MIXED.parsers["compiled"].parse(long_ids), MIXED.csv.parse(long_ids))


def _wtag(text: str) -> str:
    return text.replace(":", MIXED.features[f"m{KINDS.index('wtag')}"].kv_separator)


@BACKENDS
@pytest.mark.parametrize("fields, kind", [
    ({"wtag": _wtag("a:x")}, BAD_TAG_WEIGHT), ({"wtag": _wtag("a:")}, BAD_TAG_WEIGHT),
    ({"wtag": _wtag(":1")}, BAD_TAG_WEIGHT), ({"wtag": _wtag("a:1:2")}, BAD_TAG_WEIGHT),
    ({"wtag": _wtag("a")}, BAD_TAG_WEIGHT), ({"wtag": _wtag("a:1e")}, BAD_TAG_WEIGHT),
    ({"seq_int": "x"}, BAD_SEQUENCE), ({"tag_int": "1.5"}, BAD_VALUE), ({"seq_bucket": "abc"}, BAD_SEQUENCE),
    ({"seq_int": "99999999999999999999"}, BAD_SEQUENCE),  # past int64's range
])
def test_a_bad_value_declines_the_batch_and_csv_parser_rejects_just_its_line(backend, fields, kind):
    good, bad = _mixed_line(), _mixed_line(**fields)
    assert MIXED.parsers[backend].parse([good]) is not None
    assert MIXED.parsers[backend].parse([good, bad]) is None
    parsed = MIXED.csv.parse([good, bad])
    assert parsed.size == 1 and [(line, rejection_kind(reason)) for line, reason in parsed.rejected] == [(bad, kind)]


@BACKENDS
@pytest.mark.parametrize("fields", [
    {"wtag": _wtag("a:1e3")}, {"wtag": _wtag("a:+1")}, {"tag_int": "+4"},  # TensorFlow reads them; plain only here
    {"tag": '"a,b"'},  # a quoted field
])
def test_what_it_does_not_read_itself_goes_to_csv_parser(backend, fields):
    lines = [_mixed_line(), _mixed_line(**fields)]
    assert MIXED.parsers[backend].parse(lines) is None
    assert MIXED.csv.parse(lines).size >= 1


@BACKENDS
def test_sequences_of_one_attention_of_different_lengths_decline_the_batch(backend):
    setup = SETUPS[1]
    sep0, sep1, sep2 = (setup.features[f"m{i}"].separator for i in (0, 1, 2))
    # (a field of only a separator has no ids whatever the sequence_length; an empty one would take the default)
    good, bad = _line(f"a{sep0}b", f"c{sep1}d", sep2), _line(sep0, "c", sep2)
    assert setup.parsers[backend].parse([good]) is not None
    assert setup.parsers[backend].parse([good, bad]) is None
    parsed = setup.csv.parse([good, bad])
    assert [(line, rejection_kind(reason)) for line, reason in parsed.rejected] == [(bad, BAD_SEQUENCE)]


@BACKENDS
def test_parsed_batches_from_arrays_hold_the_ragged_features_csv_parser_makes(backend):
    lines = [_mixed_line(), _mixed_line(seq="", wtag=_mixed_field("wtag", ["", ""]))]
    batch, expected = ParsedBatch.from_vectors(MIXED.parsers[backend].parse(lines)), MIXED.csv.parse(lines)
    assert set(batch.features) == set(expected.features)
    for name, values in expected.features.items():
        got = batch.features[name]
        assert type(got) is type(values), name  # pylint: disable=unidiomatic-typecheck
        if isinstance(values, tf.RaggedTensor):
            assert got.row_splits.dtype == values.row_splits.dtype
            assert got.to_list() == values.to_list(), name
        else:
            assert got.numpy().tobytes() == values.numpy().tobytes(), name


def test_the_compiled_and_numpy_backends_agree_on_a_large_generated_batch():
    rng = np.random.default_rng(5)
    seq_sep = MIXED.features[f"m{KINDS.index('seq')}"].separator
    lines = [_mixed_line(seq=seq_sep.join(f"i{v}" for v in rng.integers(0, 1000, rng.integers(0, 40))))
             for _ in range(2000)]
    compiled, numpy_batch = (MIXED.parsers[b].parse(lines) for b in ("compiled", "numpy"))
    assert compiled.ragged_names == numpy_batch.ragged_names
    for a, b in zip(compiled.ragged, numpy_batch.ragged):
        assert a.flat_values.tobytes() == b.flat_values.tobytes() and a.row_splits.tobytes() == b.row_splits.tobytes()
    _assert_same(compiled, MIXED.csv.parse(lines))
