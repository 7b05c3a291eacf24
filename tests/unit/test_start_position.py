"""Where reading starts, without a broker: offset_info parsing and the start time from offset_time / offset_info."""
import time

import pytest

import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.config.offset_info import parse_offset_info
from easyonline.core.errors import ConfigError
from easyonline.inputs.start_position import _into_range, start_time_seconds
from easyonline.protos import pipeline_pb2

PATH = "kafka_train_input.offset_info"


# --- parse_offset_info ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ('{"0": 5, "1": 10}', ("offsets", {0: 5, 1: 10})),
    ('{"3": 0}', ("offsets", {3: 0})),
    ('{"12": 9007199254740993}', ("offsets", {12: 9007199254740993})),  # > 2^53: JSON ints stay exact
    (' {"0": 5} ', ("offsets", {0: 5})),
    ('{"timestamp": 1650765731}', ("timestamp", 1650765731.0)),
    ('{"timestamp": 1650765731.25}', ("timestamp", 1650765731.25)),
    ('{"timestamp": 0}', ("timestamp", 0.0)),
])
def test_offsets_or_a_timestamp(text, expected):
    kind, value = parse_offset_info(text, PATH)
    assert (kind, value) == expected
    assert type(value) is type(expected[1])  # noqa: E721  offsets: dict of ints; timestamp: float


@pytest.mark.parametrize("text, message", [
    ("{bad json", "not valid JSON"),
    ("", "not valid JSON"),
    ("[0, 5]", "expected a non-empty JSON object"),
    ("5", "expected a non-empty JSON object"),
    ("{}", "expected a non-empty JSON object"),
    ('{"timestamp": 1650765731, "0": 5}', "cannot be mixed with partition offsets"),
    ('{"timestamp": -1}', "timestamp must be unix seconds >= 0"),
    ('{"timestamp": "1650765731"}', "timestamp must be unix seconds >= 0"),
    ('{"timestamp": null}', "timestamp must be unix seconds >= 0"),
    ('{"timestamp": NaN}', "timestamp must be unix seconds >= 0"),  # NaN >= 0 is false
    ('{"-1": 5}', "partition '-1' is not a non-negative integer"),
    ('{"p0": 5}', "partition 'p0' is not a non-negative integer"),
    ('{" 1": 5}', "partition ' 1' is not a non-negative integer"),
    ('{"0": -1}', "offset of partition 0 must be an integer >= 0, got -1"),
    ('{"0": 1.5}', "offset of partition 0 must be an integer >= 0, got 1.5"),
    ('{"0": "5"}', "offset of partition 0 must be an integer >= 0, got '5'"),
    ('{"0": null}', "offset of partition 0 must be an integer >= 0, got None"),
])
def test_bad_offset_info_names_the_field(text, message):
    with pytest.raises(ConfigError, match=message) as e:
        parse_offset_info(text, PATH)
    assert e.value.path == PATH
    assert str(e.value).startswith(f"config field {PATH}: ")


def test_the_path_given_is_the_path_reported():
    with pytest.raises(ConfigError) as e:
        parse_offset_info("{}", "evaluator.kafka.offset_info")
    assert e.value.path == "evaluator.kafka.offset_info"


# --- start_time_seconds --------------------------------------------------------------------------------------


def _kafka(**fields):
    return pipeline_pb2.KafkaInput(server="127.0.0.1:9092", topic="t", **fields)


def test_offset_time_in_unix_seconds():
    assert start_time_seconds(_kafka(offset_time="1650765731")) == 1650765731.0
    assert start_time_seconds(_kafka(offset_time=" 1650765731.5 ")) == 1650765731.5  # spaces stripped


def test_offset_time_as_local_date_and_time():
    # "YYYYMMDD HH:MM:SS" is local time: the same instant as time.mktime of those fields
    expected = time.mktime((2022, 4, 24, 10, 2, 11, 0, 0, -1))
    assert start_time_seconds(_kafka(offset_time="20220424 10:02:11")) == expected
    # one day and one second later, 86,401 s later (no DST change in this stretch of April)
    assert start_time_seconds(_kafka(offset_time="20220425 10:02:12")) == expected + 86401


def test_offset_time_that_is_neither_form_is_refused():
    with pytest.raises(ValueError, match="'yesterday' is neither unix seconds nor 'YYYYMMDD HH:MM:SS'"):
        start_time_seconds(_kafka(offset_time="yesterday"))
    with pytest.raises(ValueError, match="neither"):
        start_time_seconds(_kafka(offset_time="2022-04-24 10:02:11"))


def test_offset_info_timestamp_is_a_start_time():
    assert start_time_seconds(_kafka(offset_info='{"timestamp": 1650765731}')) == 1650765731.0


def test_partition_offsets_and_nothing_are_not_start_times():
    assert start_time_seconds(_kafka(offset_info='{"0": 5, "1": 10}')) is None
    assert start_time_seconds(_kafka()) is None  # earliest


def test_offset_time_is_read_before_offset_info():
    # validation refuses both together; if both get here, offset_time is the start
    kafka = _kafka(offset_time="100", offset_info='{"timestamp": 200}')
    assert start_time_seconds(kafka) == 100.0


def test_bad_offset_info_raises_config_error():
    with pytest.raises(ConfigError) as e:
        start_time_seconds(_kafka(offset_info='{"timestamp": -5}'))
    assert e.value.path == "offset_info"


@pytest.mark.parametrize("text", ['{"0": true}', '{"timestamp": true}', '{"timestamp": Infinity}',
                                  '{"1": 5, "01": 6}', '{"\\u00b2": 5}'])
def test_booleans_infinity_repeated_and_non_ascii_partitions_are_refused(text):
    with pytest.raises(ConfigError, match="kafka_train_input.offset_info"):
        parse_offset_info(text, "kafka_train_input.offset_info")


# --- checkpoint offsets outside what a partition holds ---------------------------------------------------


def test_an_offset_below_the_log_start_resumes_there_and_counts_what_retention_deleted():
    kafka = pipeline_pb2.KafkaInput(topic="t")
    offsets, moves = _into_range({0: 100, 1: 700}, begin={0: 400, 1: 500}, end={0: 900, 1: 900}, kafka=kafka)
    assert offsets == {0: 400, 1: 700}
    assert moves == ["partition 0 moved 100 -> 400 (below its log start 400: 300 samples were deleted "
                     "before being trained)"]
    kafka.on_offset_out_of_range = pipeline_pb2.KafkaInput.FAIL_OUT_OF_RANGE
    with pytest.raises(ConfigError, match="partition 0: the checkpoint's offset 100 is below its log start 400"):
        _into_range({0: 100, 1: 700}, begin={0: 400, 1: 500}, end={0: 900, 1: 900}, kafka=kafka)
    # in range everywhere: nothing moved, nothing said, whatever the setting
    assert _into_range({0: 400, 1: 900}, begin={0: 400, 1: 500}, end={0: 900, 1: 900}, kafka=kafka) == \
        ({0: 400, 1: 900}, [])
