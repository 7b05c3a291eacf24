"""The dead-letter sink never blocks the training thread, and connects as the input does.

The broker here is a closed port on 127.0.0.1 (nothing listens): what a
missing or unreachable dead-letter cluster looks like to the client.
tests/integration/test_bad_input.py sends to a real broker.
"""
import socket
import time

from easyonline.inputs import dead_letter
from easyonline.inputs.dead_letter import DeadLetterSink


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_broker_costs_the_training_thread_nothing_and_every_line_is_counted(monkeypatch):
    monkeypatch.setattr(dead_letter, "MAX_QUEUED", 50)
    sink = DeadLetterSink(f"127.0.0.1:{_closed_port()}", "dead", "model")
    started = time.monotonic()
    for i in range(200):
        sink.send(f"bad line {i}".encode(), "parse: too few fields")
    queued_in = time.monotonic() - started
    # a producer that cannot connect takes 5 s to give up, and a send on it could block 60 s; the
    # training thread only queued (what does not fit in the 50-line queue is dropped at once)
    assert queued_in < 2.0, queued_in
    sink.close(timeout=15)
    assert sink.sent == 0 and sink.failed == 200


def test_the_sink_takes_only_the_security_part_of_the_input_settings():
    sink = DeadLetterSink("127.0.0.1:1", "dead", "model", {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_plain_username": "u",
        "ssl_cafile": "/ca.pem", "max_poll_records": 5, "fetch_max_wait_ms": 10})
    assert sink._settings == {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN",  # pylint: disable=protected-access
                              "sasl_plain_username": "u", "ssl_cafile": "/ca.pem"}
