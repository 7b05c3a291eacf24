"""The local broker starter on ports taken by someone else (the real tansu broker, real sockets).

CI's broker once never came up: its port, handed out by the kernel, was taken by another connection before
the broker bound it, and the test waited 30 s for nothing. These tests take the port on purpose.
"""
import socket
import time

import pytest

from easyonline.tools import local_broker
from easyonline.tools.local_broker import LocalBroker
from easyonline.utils.net import ephemeral_start, free_port


def _bound_socket() -> socket.socket:
    """A port held the way an outgoing connection holds its local port: bound, nobody listening."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    return s


def test_free_ports_are_below_the_ephemeral_range_and_differ():
    low = ephemeral_start()
    ports = {free_port() for _ in range(20)}
    assert len(ports) >= 15
    assert all(1024 < p < low for p in ports), (sorted(ports), low)


def test_a_broker_whose_given_port_is_taken_fails_at_once_naming_the_port(tmp_path):
    taken = _bound_socket()
    try:
        port = taken.getsockname()[1]
        started = time.time()
        with pytest.raises(RuntimeError, match=f"127.0.0.1:{port} exited"):
            LocalBroker(port=port, log_path=str(tmp_path / "broker.log")).start()
        assert time.time() - started < 20
    finally:
        taken.close()


def test_a_broker_whose_chosen_port_was_taken_starts_on_another(tmp_path, monkeypatch):
    taken = _bound_socket()
    try:
        port = taken.getsockname()[1]
        picks = iter([port])
        real = local_broker.free_port
        monkeypatch.setattr(local_broker, "free_port", lambda host: next(picks, None) or real(host))
        with LocalBroker(log_path=str(tmp_path / "broker.log")) as broker:
            assert broker.port != port
            broker.create_topic("after_a_taken_port")
    finally:
        taken.close()
