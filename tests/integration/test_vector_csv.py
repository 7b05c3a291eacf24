"""VectorCsvParser (compiled and numpy) gives bit-identical features to CsvParser, or declines the batch.

Random batches (ids of every length up to 70 bytes, empty fields, padding
values, signed and fractional numbers, int ids, malformed lines) are parsed
by TensorFlow and by both VectorCsvParser backends; whenever a backend
accepts a batch its ids, floats, labels and sample weights must equal
TensorFlow's exactly, and it must decline every batch CsvParser would reject
a line of. A multi-task config (two binary labels, one INT and one FLOAT, a
regression label, a label no task reads, a sample weight) checks the label
columns against CsvParser's label checks.
"""
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from easyonline.features import build_feature_specs
from easyonline.features.csv_parser import CsvParser
from easyonline.features.fingerprint import fingerprint64, hash_bucket
from easyonline.features.label_kinds import SAMPLE_WEIGHT_KEY
from easyonline.features.vector_csv import VectorCsvParser, native_available, supports
from easyonline.protos import pipeline_pb2
from tests.conftest import online_config

import tensorflow as tf


def _config(tmp_path_factory=None):
    config = pipeline_pb2.PipelineConfig()
    from google.protobuf import text_format  # pylint: disable=g-import-not-at-top
    text_format.Parse("""
      data_config {
        input_fields { input_name: "label" input_type: INT32 }
        input_fields { input_name: "price" input_type: FLOAT default_val: "1.5" }
        input_fields { input_name: "count" input_type: INT64 }
        input_fields { input_name: "user" input_type: STRING default_val: "anon" }
        input_fields { input_name: "item" input_type: STRING }
        input_fields { input_name: "shop" input_type: INT64 default_val: "7" }
        label_fields: "label" separator: "," batch_size: 64
      }
      feature_configs { input_names: "price" feature_type: RawFeature }
      feature_configs { input_names: "count" feature_type: RawFeature }
      feature_configs { input_names: "user" feature_type: IdFeature embedding_dim: 4 padding: "-" }
      feature_configs { input_names: "item" feature_type: IdFeature embedding_dim: 4 }
      feature_configs { input_names: "shop" feature_type: IdFeature embedding_dim: 4 padding: "0" }
    """, config)
    return config


CONFIG = _config()
SPECS = build_feature_specs(CONFIG)
TF_PARSER = CsvParser(SPECS)
PARSERS = {"compiled": VectorCsvParser(SPECS, native=native_available() or None),
           "numpy": VectorCsvParser(SPECS, native=False)}
BACKENDS = pytest.mark.parametrize("backend", sorted(PARSERS))

_token = st.text(alphabet="abcxyz_-0123456789é", max_size=70)
_decimal = st.one_of(
    st.floats(-1e6, 1e6, allow_nan=False).map(lambda v: repr(round(v, 6))),
    st.integers(-10**9, 10**9).map(str),
    st.sampled_from(["", "0", "-0", "0.1", ".5", "5.", "-.25", "1e3", "nan", "+1", "-", ".", "1.2.3",
                     "0.30000001192092896", "123456789012345678", "16777217", "0.1000000000000000055"]))
_int = st.one_of(st.integers(-10**18, 10**18).map(str), st.sampled_from(["", "0", "-3", "1.0", "x", "99999999999999999999"]))
_label = st.sampled_from(["0", "1", "1", "0", "2", "", "1.0"])


@st.composite
def _lines(draw):
    rows = draw(st.lists(st.tuples(_label, _decimal, _int, _token, _token, _int), min_size=1, max_size=30))
    lines = [",".join(row).encode() for row in rows]
    if draw(st.booleans()):  # sometimes a malformed line
        i = draw(st.integers(0, len(lines) - 1))
        lines[i] = draw(st.sampled_from([lines[i] + b",extra", lines[i].rsplit(b",", 1)[0], b'1,"2",3,a,b,4',
                                         b"1,2,3,\xff,b,4", b""]))
    return lines


def _assert_same(vector, parsed):
    assert vector.size == parsed.size
    expected_labels = dict(parsed.label_dict)
    if parsed.sample_weights is not None:
        expected_labels[SAMPLE_WEIGHT_KEY] = parsed.sample_weights
    assert vector.label_names == tuple(expected_labels)  # every label field, in order, then the weight
    for name, values in vector.label_columns.items():
        expected = expected_labels[name].numpy()
        assert values.dtype == expected.dtype == np.float32, name
        assert np.ascontiguousarray(values).tobytes() == expected.tobytes(), (name, values, expected)
    assert np.ascontiguousarray(vector.labels[:, 0]).tobytes() == parsed.labels.numpy().tobytes()
    assert set(vector.features) == set(parsed.features)
    for name, values in vector.features.items():
        expected = parsed.features[name].numpy()
        assert values.dtype == expected.dtype, name
        # bit-identical, -0.0 included
        assert values.tobytes() == expected.tobytes(), (name, values, expected)


def test_the_compiled_decoder_is_built():
    """setup.py builds it (tools/setup_env.sh installs with a C compiler); the rest of this file tests it."""
    assert native_available(), "easyonline/features/_csv_decoder.c was not compiled: see setup.py"
    assert PARSERS["compiled"].native and not PARSERS["numpy"].native


@BACKENDS
@settings(max_examples=300, deadline=None)
@given(lines=_lines())
def test_equals_tensorflow_or_declines(backend, lines):
    parsed = TF_PARSER.parse(lines)
    vector = PARSERS[backend].parse(lines)
    if vector is None:
        return
    assert not parsed.rejected, f"{backend} path accepted a batch CsvParser rejects: {parsed.rejected}"
    _assert_same(vector, parsed)


_valid_rows = st.lists(st.tuples(
    st.sampled_from(["0", "1"]),
    st.one_of(st.floats(-1e6, 1e6, allow_nan=False).map(lambda v: f"{v:.{abs(hash(v)) % 7}f}"), st.just("")),
    st.one_of(st.integers(-10**18 + 1, 10**18 - 1).map(str), st.just("")),  # up to 18 digits
    st.text(alphabet="abcxyz_-0123456789é", max_size=64), st.text(alphabet="0123456789abcdef", max_size=20),
    st.integers(-10**12, 10**12).map(str)), min_size=1, max_size=50)


@BACKENDS
@settings(max_examples=200, deadline=None)
@given(rows=_valid_rows)
def test_accepts_valid_batches_with_identical_features(backend, rows):
    lines = [",".join(row).encode() for row in rows]
    vector = PARSERS[backend].parse(lines)
    assert vector is not None
    _assert_same(vector, TF_PARSER.parse(lines))


@BACKENDS
def test_takes_the_common_batches(backend):
    """Declining is always safe, so check that ordinary batches are in fact accepted."""
    lines = [b"1,0.25,3,u1,i9,12", b"0,-7,,,item_long_name_" + b"x" * 40 + b",", b"0,,-4,-,i,0", b"1,5.,0,u,,3"]
    vector = PARSERS[backend].parse(lines)
    assert vector is not None
    _assert_same(vector, TF_PARSER.parse(lines))
    assert vector.features["user"][2] == -1 and vector.features["shop"][2] == -1  # padding values
    assert vector.features["price"][1] == -7.0 and vector.features["price"][2] == 1.5  # default


@BACKENDS
@pytest.mark.parametrize("lines", [
    [b"1,0.25,3,u1,i9,12", b"1,0.25,3,u1,i9"],  # a short line
    [b"1,0.25,3,u1,i9,12,", b"1,0.25,3,u1,i9,12"],  # a long line
    [b"2,0.25,3,u1,i9,12"],  # label not 0/1
    [b"1.0,0.25,3,u1,i9,12"],  # an INT32 label written as a float: TensorFlow rejects it
    [b'1,0.25,3,"u,1",i9,12'],  # quoted field
    [b"1,1e5,3,u1,i9,12"],  # exponent: TensorFlow reads it
    [b"1,0.25,3.5,u1,i9,12"],  # a fraction in an int field
    [b"1,0.25,3,u1,i9,1234567890123456789"],  # 19 digits
    [b"1,1234567890.1234567,3,u1,i9,12"],  # 17 digits in a float
    [b"1,0.25,3,u1\r,i9,12"],  # a carriage return
])
def test_declines_what_it_does_not_cover(backend, lines):
    assert PARSERS[backend].parse(lines) is None


@BACKENDS
def test_a_batch_of_only_empty_messages_has_nothing_to_parse(backend):
    assert PARSERS[backend].parse_blob(b"", 0) is None
    assert PARSERS[backend].parse([b"", b""]) is None


@BACKENDS
@pytest.mark.parametrize("blob", [b"\n1,0.25,3,u1,i9,12", b"1,0.25,3,u1,i9,12\n", b"1,0.25,3,u1,i9,12\n\n1,2,3,u,i,4"])
def test_a_blob_with_an_empty_line_is_declined_whole_and_parsed_as_lines(backend, blob):
    """The reader process parses a batch's blob as it is and splits it into lines only if that is declined."""
    count = blob.count(b"\n") + 1
    assert PARSERS[backend].parse_blob(blob, count) is None
    lines = blob.split(b"\n")
    _assert_same(PARSERS[backend].parse(lines), TF_PARSER.parse([line for line in lines if line]))


def test_only_numpy_declines_ids_over_64_bytes():
    lines = [b"1,0.25,3," + b"u" * n + b",i" * 1 + b"9" * n + b",12" for n in (65, 100, 200, 1000)]
    assert PARSERS["numpy"].parse(lines) is None
    _assert_same(PARSERS["compiled"].parse(lines), TF_PARSER.parse(lines))


def test_fingerprint_equals_tensorflow_for_every_length():
    rng = np.random.default_rng(3)
    strings = [bytes(rng.integers(0, 256, n, dtype=np.uint8)) for n in list(range(0, 65)) * 20]
    blob = b"".join(strings)
    starts = np.cumsum([0] + [len(s) for s in strings[:-1]])
    fingerprints, too_long = fingerprint64(blob, starts, [len(s) for s in strings])
    assert not too_long.any()
    expected = tf.strings.to_hash_bucket_fast(tf.constant(strings), 2**63 - 1).numpy()
    np.testing.assert_array_equal(hash_bucket(fingerprints, 2**63 - 1), expected)


def test_compiled_fingerprint_equals_tensorflow_for_every_length():
    """Including FarmHash's loop over 64-byte blocks, which the numpy port leaves out."""
    from easyonline.features import _csv_decoder  # pylint: disable=g-import-not-at-top
    rng = np.random.default_rng(4)
    strings = [bytes(rng.integers(0, 256, n, dtype=np.uint8)) for n in list(range(0, 300)) * 3 + [1000, 4097]]
    expected = tf.strings.to_hash_bucket_fast(tf.constant(strings), 2**63 - 1).numpy()
    np.testing.assert_array_equal([_csv_decoder.fingerprint64(s) % (2**63 - 1) for s in strings], expected)


def test_supports_only_plain_csv_configs(tmp_path):
    config = online_config(tmp_path)
    assert supports(build_feature_specs(config), config.data_config)
    config.data_config.input_format = pipeline_pb2.DataConfig.JSON
    assert not supports(build_feature_specs(config), config.data_config)


# --- several labels of several kinds, and a sample weight -------------------------------------------------

MULTI_CONFIG = """
  data_config {
    input_fields { input_name: "click" input_type: INT32 }
    input_fields { input_name: "buy" input_type: FLOAT default_val: "1" }
    input_fields { input_name: "rating" input_type: FLOAT default_val: "2.5" }
    input_fields { input_name: "spare" input_type: INT64 default_val: "-3" }
    input_fields { input_name: "w" input_type: FLOAT default_val: "1" }
    input_fields { input_name: "price" input_type: FLOAT }
    input_fields { input_name: "item" input_type: STRING }
    label_fields: ["click", "buy", "rating", "spare"] sample_weight: "w" separator: "," batch_size: 64
  }
  feature_configs { input_names: "price" feature_type: RawFeature }
  feature_configs { input_names: "item" feature_type: IdFeature embedding_dim: 4 }
  model_config {
    model_class: "MMoE"
    mmoe { expert_dnn { hidden_units: [4] } num_expert: 2
           task_towers { tower_name: "ctr" label_name: "click" }
           task_towers { tower_name: "cvr" label_name: "buy" }
           task_towers { tower_name: "stars" label_name: "rating" loss_type: L2_LOSS } }
  }
"""


def _multi_config():
    from google.protobuf import text_format  # pylint: disable=g-import-not-at-top
    return text_format.Parse(MULTI_CONFIG, pipeline_pb2.PipelineConfig())


MULTI_SPECS = build_feature_specs(_multi_config())
MULTI_TF_PARSER = CsvParser(MULTI_SPECS)
MULTI_PARSERS = {"compiled": VectorCsvParser(MULTI_SPECS, native=native_available() or None),
                 "numpy": VectorCsvParser(MULTI_SPECS, native=False)}
# what each label field and the weight may be written as: good, bad for its kind, and not plain decimals
_binary_int = st.sampled_from(["0", "1", "1", "0", "", "-0", "2", "-1", "1.0", "0.5", "nan", "inf"])
_binary_float = st.sampled_from(["0", "1", "1.0", "0.0", "-0", "", ".0", "1.", "0.5", "0.99999999999", "2",
                                 "-1", "nan", "inf", "1e0"])
_number = st.one_of(st.floats(-1e6, 1e6, allow_nan=False).map(lambda v: repr(round(v, 4))),
                    st.sampled_from(["4.5", "-3", "", "-0", "0", "nan", "inf", "-inf", "1e3", "NaN"]))
_int_label = st.one_of(st.integers(-10**12, 10**12).map(str), st.sampled_from(["", "-3", "4.5", "nan"]))
_weight = st.one_of(st.floats(0, 1e4, allow_nan=False).map(lambda v: repr(round(v, 3))),
                    st.sampled_from(["1", "0", "-0", "", "2.5", "-1", "-0.5", "nan", "inf", "-inf", "1e2"]))


@st.composite
def _multi_lines(draw):
    rows = draw(st.lists(st.tuples(_binary_int, _binary_float, _number, _int_label, _weight, _decimal, _token),
                         min_size=1, max_size=30))
    return [",".join(row).encode() for row in rows]


def test_the_multi_task_config_carries_every_label_field_then_the_weight():
    assert MULTI_SPECS.label_kinds == {"click": "binary", "buy": "binary", "rating": "regression"}
    assert MULTI_PARSERS["compiled"].label_names == ("click", "buy", "rating", "spare", SAMPLE_WEIGHT_KEY)
    config = _multi_config()
    assert supports(MULTI_SPECS, config.data_config)


@pytest.mark.parametrize("backend", sorted(MULTI_PARSERS))
@settings(max_examples=300, deadline=None)
@given(lines=_multi_lines())
def test_labels_and_weights_equal_tensorflow_or_decline(backend, lines):
    parsed = MULTI_TF_PARSER.parse(lines)
    vector = MULTI_PARSERS[backend].parse(lines)
    if vector is None:
        return
    assert not parsed.rejected, f"{backend} path accepted a batch CsvParser rejects: {parsed.rejected}"
    _assert_same(vector, parsed)


_valid_multi_rows = st.lists(st.tuples(
    st.sampled_from(["0", "1", "", "-0"]), st.sampled_from(["0", "1", "1.0", "0.0", "-0", "", ".0", "1."]),
    st.one_of(st.floats(-1e6, 1e6, allow_nan=False).map(lambda v: f"{v:.{abs(hash(v)) % 5}f}"), st.just("")),
    st.one_of(st.integers(-10**15, 10**15).map(str), st.just("")),
    st.one_of(st.floats(0, 1e6, allow_nan=False).map(lambda v: f"{v:.{abs(hash(v)) % 5}f}"), st.just(""),
              st.just("-0")),
    st.floats(-1e3, 1e3, allow_nan=False).map(lambda v: f"{v:.2f}"), st.text(alphabet="abc_019", max_size=12)),
    min_size=1, max_size=50)


@pytest.mark.parametrize("backend", sorted(MULTI_PARSERS))
@settings(max_examples=200, deadline=None)
@given(rows=_valid_multi_rows)
def test_accepts_valid_labels_and_weights_with_identical_values(backend, rows):
    lines = [",".join(row).encode() for row in rows]
    parsed = MULTI_TF_PARSER.parse(lines)
    assert not parsed.rejected
    vector = MULTI_PARSERS[backend].parse(lines)
    assert vector is not None
    _assert_same(vector, parsed)


@pytest.mark.parametrize("backend", sorted(MULTI_PARSERS))
def test_regression_labels_defaults_and_weights_are_taken(backend):
    """Declining is always safe, so check that ordinary multi-task batches are in fact accepted."""
    lines = [b"1,0,4.5,7,2,0.5,a", b"0,,-3,,,1,b", b"1,1.0,,-2,0,-1,c", b"0,0.0,0,0,-0,2,"]
    vector = MULTI_PARSERS[backend].parse(lines)
    assert vector is not None
    _assert_same(vector, MULTI_TF_PARSER.parse(lines))
    columns = vector.label_columns
    assert columns["rating"].tolist() == [4.5, -3.0, 2.5, 0.0]  # a regression label; its default
    assert columns["buy"].tolist() == [0.0, 1.0, 1.0, 0.0]  # an empty binary label takes its default, 1
    assert columns["spare"].tolist() == [7.0, -3.0, -2.0, 0.0]  # no task reads it: any number
    assert columns[SAMPLE_WEIGHT_KEY].tolist() == [2.0, 1.0, 0.0, 0.0]  # default 1; 0 is a weight


@pytest.mark.parametrize("backend", sorted(MULTI_PARSERS))
@pytest.mark.parametrize("line, kind", [
    (b"1,0.5,4.5,7,2,0.5,a", "bad_label"),  # 0.5 as a binary label
    (b"2,0,4.5,7,2,0.5,a", "bad_label"),  # 2 as a binary INT label
    (b"1,-1,4.5,7,2,0.5,a", "bad_label"),  # -1 as a binary FLOAT label
    (b"1,0,4.5,7,-1,0.5,a", "bad_weight"),  # a negative weight
    (b"1,0,4.5,7,-0.5,0.5,a", "bad_weight"),
    (b"1,0,nan,7,2,0.5,a", "bad_label"),  # a regression label "nan"
    (b"1,0,inf,7,2,0.5,a", "bad_label"),
    (b"1,0,4.5,7,nan,0.5,a", "bad_weight"),  # a weight "nan"
    (b"1,0,4.5,7,inf,0.5,a", "bad_weight"),
    (b"1,0,4.5,4.5,2,0.5,a", "bad_value"),  # a fraction in an INT64 label: TensorFlow cannot read it
])
def test_a_batch_with_a_bad_label_or_weight_goes_to_csv_parser(backend, line, kind):
    """The array path declines the whole batch; CsvParser then rejects just that line, with its reason."""
    from easyonline.core.rejections import rejection_kind  # pylint: disable=g-import-not-at-top
    good = b"0,1,-3,5,1,2,b"
    assert MULTI_PARSERS[backend].parse([good]) is not None
    assert MULTI_PARSERS[backend].parse([good, line]) is None
    parsed = MULTI_TF_PARSER.parse([good, line])
    assert parsed.size == 1 and [(bad, rejection_kind(reason)) for bad, reason in parsed.rejected] == [(line, kind)]


def test_a_string_label_or_a_tag_separator_of_two_bytes_keeps_the_config_off_the_array_path():
    config = _multi_config()
    config.data_config.input_fields[3].input_type = pipeline_pb2.DataConfig.STRING  # "spare": CsvParser keeps text
    assert not supports(build_feature_specs(config), config.data_config)
    config = _multi_config()
    config.feature_configs[1].feature_type = pipeline_pb2.FeatureConfig.TagFeature
    config.feature_configs[1].separator = "|"
    assert supports(build_feature_specs(config), config.data_config)  # (tests/unit/test_vector_csv_sequences.py)
    config.feature_configs[1].separator = "\u00a7"  # one character, two bytes
    assert not supports(build_feature_specs(config), config.data_config)


@pytest.mark.parametrize("backend", sorted(MULTI_PARSERS))
def test_parsed_batches_from_arrays_carry_labels_by_name_and_weights(backend):
    """ParsedBatch.from_vectors hands labels and weights over as CsvParser's batch does."""
    from easyonline.features.csv_parser import ParsedBatch  # pylint: disable=g-import-not-at-top
    lines = [b"1,0,4.5,7,2,0.5,a", b"0,,-3,,,1,b"]
    batch, expected = ParsedBatch.from_vectors(MULTI_PARSERS[backend].parse(lines)), MULTI_TF_PARSER.parse(lines)
    assert list(batch.label_dict) == list(expected.label_dict) == ["click", "buy", "rating", "spare"]
    for name, values in expected.label_dict.items():
        assert batch.label_dict[name].numpy().tobytes() == values.numpy().tobytes(), name
    assert batch.sample_weights.numpy().tobytes() == expected.sample_weights.numpy().tobytes()
    assert batch.labels.numpy().tobytes() == expected.labels.numpy().tobytes()


def _produce_to_one_partition(broker, topic, lines) -> None:
    """A one-partition topic holding ``lines``, one per message, in order."""
    from kafka import KafkaProducer  # pylint: disable=g-import-not-at-top
    broker.create_topic(topic, 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    for line in lines:
        producer.send(topic, line, partition=0)
    producer.flush()
    producer.close()


@BACKENDS
def test_reader_process_sends_parsed_batches_and_lines_for_the_rest(broker, topic, tmp_path, backend):
    """Clean batches arrive parsed (equal to CsvParser's); a batch with a bad line arrives as lines only."""
    from easyonline.inputs.reader_process import KafkaReaderProcess  # pylint: disable=g-import-not-at-top
    from easyonline.tools.stream_producer import SyntheticCtrStream  # pylint: disable=g-import-not-at-top
    config = online_config(tmp_path, broker.bootstrap, topic)
    specs = build_feature_specs(config)
    lines = SyntheticCtrStream().lines(0, 200)
    lines[150] = b"1,not,enough,fields"
    _produce_to_one_partition(broker, topic, lines)
    parser = VectorCsvParser(specs, native=backend == "compiled")
    source = KafkaReaderProcess(config.kafka_train_input, 100, 200, vector_parser=parser)
    try:
        batches = []
        while sum(len(b.lines) for b in batches) < 200:
            batch = source.next_batch(5.0)
            assert batch is not None
            batches.append(batch)
    finally:
        source.close()
    assert [list(b.lines) for b in batches] == [lines[:100], lines[100:]]
    assert batches[0].parsed is not None and batches[1].parsed is None
    expected = CsvParser(specs).parse(lines[:100])
    for name, values in batches[0].parsed.features.items():
        assert values.numpy().tobytes() == expected.features[name].numpy().tobytes(), name
    assert batches[0].parsed.labels.numpy().tobytes() == expected.labels.numpy().tobytes()
    assert batches[1].positions == {0: 200}


def test_reader_process_batches_cross_in_shared_memory_and_none_is_overwritten(broker, topic, tmp_path):
    """The reader runs ahead through the ring several times while the trainer side is slow; every
    batch still arrives equal to CsvParser's parse of its own lines, and no /dev/shm file is left."""
    import time  # pylint: disable=g-import-not-at-top
    from easyonline.inputs.reader_process import KafkaReaderProcess  # pylint: disable=g-import-not-at-top
    from easyonline.tools.stream_producer import SyntheticCtrStream  # pylint: disable=g-import-not-at-top
    config = online_config(tmp_path, broker.bootstrap, topic)
    specs = build_feature_specs(config)
    lines = SyntheticCtrStream().lines(0, 1200)
    _produce_to_one_partition(broker, topic, lines)
    source = KafkaReaderProcess(config.kafka_train_input, 40, 200, vector_parser=VectorCsvParser(specs), depth=2)
    try:
        assert source._slots is not None and not os.path.exists(source._slots.path)  # mapped, then unlinked
        batches = []
        while sum(b.parsed.size for b in batches) < len(lines):
            time.sleep(0.02)  # the reader fills the queue and waits on it
            batch = source.next_batch(5.0)
            assert batch is not None and batch.parsed is not None
            batches.append(batch)
    finally:
        source.close()
    assert len(batches) >= 3 * source._slots.count  # the ring of depth + 3 slots went round several times
    parser, done = CsvParser(specs), 0
    for batch in batches:
        own = lines[done:done + batch.parsed.size]
        assert list(batch.lines) == own
        expected = parser.parse(own)
        for name, values in batch.parsed.features.items():
            assert values.numpy().tobytes() == expected.features[name].numpy().tobytes(), (done, name)
        assert batch.parsed.labels.numpy().tobytes() == expected.labels.numpy().tobytes()
        done += batch.parsed.size
    assert batches[-1].positions == {0: len(lines)}


def test_reader_process_takes_messages_of_several_lines_and_skips_their_empty_lines(broker, topic, tmp_path):
    """Messages of three lines cross as one blob per batch; a message that ends in a newline (an empty
    line) still gives exactly its samples, parsed as CsvParser parses them."""
    from easyonline.inputs.reader_process import KafkaReaderProcess  # pylint: disable=g-import-not-at-top
    from easyonline.tools.stream_producer import SyntheticCtrStream  # pylint: disable=g-import-not-at-top
    config = online_config(tmp_path, broker.bootstrap, topic)
    specs = build_feature_specs(config)
    lines = SyntheticCtrStream().lines(0, 300)
    messages = [b"\n".join(lines[i:i + 3]) for i in range(0, 300, 3)]
    messages[10] += b"\n"  # a trailing newline: an empty line the parsers skip
    _produce_to_one_partition(broker, topic, messages)
    source = KafkaReaderProcess(config.kafka_train_input, 60, 200, vector_parser=VectorCsvParser(specs))
    try:
        batches = []
        while sum(b.parsed.size for b in batches) < len(lines):
            batch = source.next_batch(5.0)
            assert batch is not None and batch.parsed is not None
            batches.append(batch)
    finally:
        source.close()
    trained = [line for b in batches for line in b.lines if line]
    assert trained == lines
    assert sum(len(b.lines) for b in batches) == len(lines) + 1  # the empty line is seen, not trained
    expected = CsvParser(specs).parse(lines)
    for name in expected.features:
        got = np.concatenate([b.parsed.features[name].numpy() for b in batches])
        assert got.tobytes() == expected.features[name].numpy().tobytes(), name
    assert batches[-1].positions == {0: len(messages)}


def test_a_trainer_fed_the_arrays_trains_as_one_fed_the_features(tmp_path):
    """The step that takes a VectorBatch's arrays whole (and splits them into features inside the graph)
    gives the same probabilities, batch after batch, as the step fed CsvParser's features, from the same
    start; and the features made from the arrays on demand equal CsvParser's."""
    from easyonline.features.csv_parser import ParsedBatch  # pylint: disable=g-import-not-at-top
    from easyonline.jobs.online_train import build_trainer  # pylint: disable=g-import-not-at-top
    from easyonline.tools.stream_producer import SyntheticCtrStream  # pylint: disable=g-import-not-at-top
    lines = SyntheticCtrStream().lines(0, 6 * 256)
    trainers = [build_trainer(online_config(tmp_path / name), online=False) for name in ("features", "arrays")]
    specs = trainers[0].specs
    vector_parser, csv_parser = VectorCsvParser(specs), CsvParser(specs)
    for start in range(0, len(lines), 256):
        chunk = lines[start:start + 256]
        expected = csv_parser.parse(chunk)
        from_arrays = ParsedBatch.from_vectors(vector_parser.parse(chunk))
        by_features = trainers[0].train_batch(expected.features, expected.labels)
        by_arrays = trainers[1].train_vectors(from_arrays.vectors)
        assert by_arrays.keys() == by_features.keys() == {"ctr"}
        np.testing.assert_allclose(by_arrays["ctr"], by_features["ctr"], rtol=1e-5, atol=1e-6)
    assert set(from_arrays.features) == set(expected.features)
    for name, values in expected.features.items():
        assert from_arrays.features[name].numpy().tobytes() == values.numpy().tobytes(), name
    assert trainers[0].table_sizes() == trainers[1].table_sizes()
