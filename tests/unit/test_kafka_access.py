"""How a failed kafka-python bootstrap is worded from what its connection loggers recorded (utils/kafka_access.py).

The records are made by the test (a real failed login is test_kafka_security's, on Apache Kafka): the case here
is the one a real broker shows only now and then, a SASL client whose every connection was closed with the
refusal's answer lost (about 1 of 12 failed bootstraps with SCRAM over TLS), which must not read as an outage.
"""
import logging
import time

from kafka.errors import KafkaConnectionError, SaslAuthenticationFailedError

from easyonline.core.errors import KafkaAccessError
from easyonline.utils import kafka_access

SASL = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "trainer",
        "sasl_plain_password": "x", "ssl_cafile": "/ca.pem"}


def _log(error: Exception) -> None:
    logging.getLogger("kafka.net.connection").error("%s: Connection lost: %s", "<conn>", error)


def test_a_refusal_read_is_worded_with_user_and_mechanism():
    started = time.time()
    _log(SaslAuthenticationFailedError("SaslAuthenticationFailedError: Authentication failed during "
                                       "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"))
    error = kafka_access.refusal(started, SASL, "127.0.0.1:9093", "kafka_train_input.config")
    assert isinstance(error, KafkaAccessError) and error.exit_code == 7
    assert "refused user 'trainer': authentication failed (SASL mechanism SCRAM-SHA-512)" in str(error)


def test_a_sasl_client_whose_connections_were_all_closed_was_refused_not_cut_off():
    started = time.time()
    _log(KafkaConnectionError("socket disconnected"))
    error = kafka_access.refusal(started, SASL, "127.0.0.1:9093", "kafka_train_input.config")
    assert isinstance(error, KafkaAccessError)
    assert "authentication failed" in str(error) and "closed every connection" in str(error)
    # without SASL a closed connection is an outage (None: the caller says the broker is unreachable)
    assert kafka_access.refusal(started, {"security_protocol": "SSL"}, "127.0.0.1:9093", "x") is None
    # and closures before this client started are not its own
    assert kafka_access.refusal(time.time() + 1, SASL, "127.0.0.1:9093", "x") is None
