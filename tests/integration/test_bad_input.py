"""Malformed input: every kind counted exactly, dead-lettered, skipped; garbage streams stop the trainer."""
import collections

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from kafka import KafkaConsumer

from easyonline.features import build_feature_specs
from easyonline.features.csv_parser import CsvParser
from easyonline.core.rejections import REJECTION_KINDS, rejection_kind
from easyonline.updates.codec import MalformedUpdateError, decode_update
from easyonline.tools.stream_producer import SyntheticCtrStream, produce
from easyonline.inputs.bad_input import BadInputError
from easyonline.jobs.online_train import build_trainer
from tests.conftest import online_config

FAST = {"data_config.batch_size": 500, "train_config.save_checkpoints_secs": 0}


def _corrupt(line: bytes, kind: str) -> bytes:
    fields = line.split(b",")
    if kind == "field_count":
        return b",".join(fields[:-1])
    if kind == "bad_value":
        fields[1] = b"not-a-number"
    elif kind == "invalid_utf8":
        fields[20] = b"id\xff\xfe"
    elif kind == "bad_label":
        fields[0] = b"7"
    elif kind == "oversized_message":
        fields[20] = b"x" * 5000
    elif kind == "empty_message":
        return b""
    return b",".join(fields)


KINDS = ("field_count", "bad_value", "invalid_utf8", "bad_label", "oversized_message", "empty_message")


def _stream(good: int, every: int):
    """Good lines with one bad message of each kind in turn after every ``every`` good ones."""
    lines, injected = [], collections.Counter()
    source = SyntheticCtrStream().lines(0, good + good // every + 1)
    for i, line in enumerate(source[:good]):
        lines.append(line)
        if i % every == every - 1:
            kind = KINDS[(i // every) % len(KINDS)]
            lines.append(_corrupt(source[good + i // every], kind))
            injected[kind] += 1
    return lines, injected


def test_every_kind_of_bad_message_is_counted_dead_lettered_and_skipped(broker, topic, tmp_path):
    lines, injected = _stream(6000, 20)  # 300 bad messages, 5% of the stream, 50 of each kind
    broker.create_topic(topic, 2)
    produce(broker.bootstrap, topic, [lines], partitions=2)
    config = online_config(tmp_path / "m", broker.bootstrap, topic, **FAST, **{
        "data_config.dead_letter_topic": topic + "_dead", "data_config.max_message_bytes": 3000})
    trainer = build_trainer(config, online=False)
    summary = trainer.run()
    assert summary.samples == 6000  # every good sample trained once, none of the bad
    expected = {kind: injected[kind] for kind in REJECTION_KINDS if kind in injected}
    assert {k: v for k, v in trainer.bad_input.counts.items() if v} == expected
    assert trainer.bad_input.empty_messages == injected["empty_message"] == 50
    assert summary.rejected == 250

    consumer = KafkaConsumer(topic + "_dead", bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=30000)
    dead = collections.Counter()
    for record in consumer:  # until every rejection came (30 s without one ends it short, and the test fails)
        headers = dict(record.headers)
        assert rejection_kind(headers["reason"].decode()) == headers["kind"].decode()
        dead[headers["kind"].decode()] += 1
        if sum(dead.values()) >= sum(expected.values()):
            break
    consumer.close()
    assert dict(dead) == expected


def test_a_stream_of_garbage_stops_the_trainer_with_a_clear_error(tmp_path):
    good = SyntheticCtrStream().lines(0, 3000)
    lines = [line if i % 3 == 0 else _corrupt(line, "bad_value") for i, line in enumerate(good)]  # 2/3 bad
    (tmp_path / "garbage.csv").write_bytes(b"\n".join(lines) + b"\n")
    config = online_config(tmp_path / "m", **FAST, **{"data_config.bad_input_window": 1000})
    config.ClearField("kafka_train_input")
    config.file_train_input.paths.append(str(tmp_path / "garbage.csv"))
    trainer = build_trainer(config, online=False)
    with pytest.raises(BadInputError, match=r"of the last \d+ lines were rejected .*max_bad_fraction=0.5"):
        trainer.run()
    assert trainer.last_checkpoint is not None  # what was trained before the stop is kept
    assert trainer.bad_input.counts["bad_value"] >= 500


@pytest.fixture(scope="module")
def csv_parser(tmp_path_factory):
    return CsvParser(build_feature_specs(online_config(tmp_path_factory.mktemp("fuzz"))))


near_valid = st.lists(st.sampled_from([b"1", b"0", b"0.5", b"-3", b"abc", b"", b'"q,uoted"', b'"', b"\xff", b"9" * 30,
                                       b"\x00", b"nan", b"1e309"]), min_size=30, max_size=45).map(b",".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.binary(max_size=300), near_valid), min_size=1, max_size=12))
def test_fuzzed_lines_become_samples_or_counted_rejections(csv_parser, lines):
    lines = [line.replace(b"\n", b" ") for line in lines]  # a message is split into lines before parsing
    batch = csv_parser.parse(lines)
    non_empty = sum(1 for line in lines if line.rstrip(b"\r"))
    assert batch.size + len(batch.rejected) == non_empty
    assert all(rejection_kind(reason) in REJECTION_KINDS for _, reason in batch.rejected)
    assert set(np.unique(batch.labels.numpy())) <= {0.0, 1.0}


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_fuzzed_update_messages_decode_or_are_refused_with_a_reason(data):
    try:
        message = decode_update(data)
    except MalformedUpdateError as e:
        assert str(e)
        return
    assert message.header.sequence >= 1 and message.header.model_name
