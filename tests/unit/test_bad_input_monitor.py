"""Rejection reasons and BadInputMonitor: counts by kind, bounded logging, and the max_bad_fraction ceiling.

No dead-letter topic here (it needs a broker); the monitor works the same without one.
"""
import logging

import pytest

import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core import rejections
from easyonline.core.errors import BadInputError
from easyonline.inputs.bad_input import BadInputMonitor
from easyonline.protos import pipeline_pb2


def _monitor(max_bad_fraction=0.5, bad_input_window=10, **kwargs):
    data = pipeline_pb2.DataConfig(max_bad_fraction=max_bad_fraction, bad_input_window=bad_input_window)
    return BadInputMonitor(data, **kwargs)


def _bad(n, kind=rejections.BAD_VALUE):
    return [(f"line{i}".encode(), rejections.rejection(kind, f"detail {i}")) for i in range(n)]


# --- rejections ------------------------------------------------------------------------------------------


def test_a_reason_starts_with_its_kind_and_is_capped_at_200_chars():
    assert rejections.rejection(rejections.FIELD_COUNT, "expected 6 fields, got 2") == \
        "field_count: expected 6 fields, got 2"
    long = rejections.rejection(rejections.BAD_RECORD, "x" * 500)
    assert len(long) == 200 and long.startswith("bad_record: xxx")


@pytest.mark.parametrize("reason, kind", [
    ("field_count: expected 3", "field_count"),
    ("invalid_utf8: byte 0xff", "invalid_utf8"),
    ("oversized_message: 5000000 bytes", "oversized_message"),
    ("bad_label: 'x'", "bad_label"),
    ("bad_record: truncated", "bad_record"),
    ("bad_value: 'zz' is not a valid float", "bad_value"),
    ("something_new: ...", "bad_value"),  # an unknown kind is counted as a bad value
    ("no colon at all", "bad_value"),
    ("", "bad_value"),
])
def test_rejection_kind(reason, kind):
    assert rejections.rejection_kind(reason) == kind


def test_every_kind_round_trips_through_a_reason():
    for kind in rejections.REJECTION_KINDS:
        assert rejections.rejection_kind(rejections.rejection(kind, "a: b: c")) == kind


# --- BadInputMonitor: counts --------------------------------------------------------------------------------


def test_counts_by_kind_total_and_status_fields():
    monitor = _monitor(max_bad_fraction=1.0)
    monitor.record(5, _bad(2, rejections.FIELD_COUNT) + [(b"x", "weird reason")], empty_messages=2)
    monitor.record(5, _bad(1, rejections.INVALID_UTF8) + _bad(1, rejections.FIELD_COUNT))
    assert monitor.counts == {"field_count": 3, "bad_value": 1, "invalid_utf8": 1, "bad_label": 0, "bad_weight": 0,
                              "bad_record": 0, "oversized_message": 0, "bad_tag_weight": 0, "bad_sequence": 0}
    assert monitor.total == 5 and monitor.empty_messages == 2
    # only non-zero counts, as strings, prefixed with "bad."
    assert monitor.status_fields() == {"bad.field_count": "3", "bad.bad_value": "1", "bad.invalid_utf8": "1",
                                       "bad.empty_messages": "2"}
    assert _monitor().status_fields() == {}


def test_default_data_config_values():
    monitor = BadInputMonitor(pipeline_pb2.DataConfig())  # proto2 defaults: 0.5 and 10,000
    assert monitor.max_fraction == 0.5 and monitor.window == 10000
    monitor.record(0, _bad(9999))  # 9,999 bad lines: fewer than a window seen, no verdict yet
    with pytest.raises(BadInputError):
        monitor.record(0, _bad(1))  # 10,000 of 10,000


# --- BadInputMonitor: the ceiling -------------------------------------------------------------------------


def test_ceiling_is_strictly_more_than_the_fraction_of_the_window():
    monitor = _monitor(max_bad_fraction=0.5, bad_input_window=10)
    monitor.record(8, _bad(2))  # [(10, 2)]: 2 of 10 bad
    monitor.record(0, _bad(6))  # [(10, 2), (6, 6)]: dropping the first batch would leave 6 < 10 lines;
    #                             8 of 16 bad, 8 > 0.5 x 16 = 8 is false: at the ceiling, not over it
    with pytest.raises(BadInputError) as e:
        monitor.record(0, _bad(1))  # [(10, 2), (6, 6), (1, 1)]: 9 of 17 bad, 9 > 8.5
    message = str(e.value)
    assert "9 of the last 17 lines were rejected" in message
    assert "max_bad_fraction=0.5" in message and "bad_value=9" in message
    assert e.value.exit_code == 4


def test_no_verdict_before_a_window_of_lines():
    monitor = _monitor(max_bad_fraction=0.5, bad_input_window=10)
    monitor.record(0, _bad(9))  # 9 of 9 bad, but only 9 < 10 lines seen
    with pytest.raises(BadInputError, match="9 of the last 10 lines"):
        monitor.record(1, [])  # now a full window: 9 > 5


def test_old_good_lines_leave_the_window():
    monitor = _monitor(max_bad_fraction=0.5, bad_input_window=10)
    monitor.record(10, [])
    monitor.record(5, _bad(5))  # [(10, 0), (10, 5)] -> 20 - 10 >= 10: the first leaves; 5 > 5 is false
    monitor.record(10, [])  # [(10, 5), (10, 0)] -> the (10, 5) batch leaves: 0 of 10
    with pytest.raises(BadInputError, match="10 of the last 10 lines"):
        monitor.record(0, _bad(10))  # the 10 good lines leave too: 10 of 10


def test_a_good_stream_with_some_bad_lines_runs_forever():
    monitor = _monitor(max_bad_fraction=0.2, bad_input_window=100)
    for _ in range(200):
        monitor.record(8, _bad(2))  # 2 of 10 = 0.2 per batch, exactly at the ceiling
    assert monitor.total == 400


def test_fraction_one_never_stops():
    monitor = _monitor(max_bad_fraction=1.0, bad_input_window=1)
    for _ in range(50):
        monitor.record(0, _bad(3))
    assert monitor.counts["bad_value"] == 150


# --- BadInputMonitor: logging ---------------------------------------------------------------------------


def test_logs_first_batch_then_at_most_every_log_every_secs_and_the_rest_at_close(caplog):
    monitor = _monitor(max_bad_fraction=1.0, log_every_secs=3600)
    with caplog.at_level(logging.WARNING, logger="easyonline.inputs.bad_input"):
        monitor.record(1, [(b"first,line", "field_count: expected 3, got 2")])
        monitor.record(1, _bad(2) + _bad(1, rejections.BAD_LABEL))  # within the hour: held back
        monitor.record(1, [])
        assert len(caplog.records) == 1
        assert "rejected 1 sample(s) (field_count=1)" in caplog.records[0].getMessage()
        assert "b'first,line'" in caplog.records[0].getMessage()
        monitor.close()  # flushes what was held back, with one example
    assert len(caplog.records) == 2
    flushed = caplog.records[1].getMessage()
    assert "rejected 3 sample(s) (bad_label=1 bad_value=2)" in flushed and "line0" in flushed
