"""Kafka's refusals as one error naming the cause: a failed SASL login, an untrusted certificate, an ACL.

kafka-python retries a failed SASL login or TLS handshake until its
bootstrap timeout and then says only ``Unable to bootstrap from ...``; a
topic the principal may not DESCRIBE looks like a missing one. Neither gets
better by retrying, so every client easyonline opens turns them into a
``KafkaAccessError`` (exit code 7) that names the user and mechanism, the CA
file setting, or the principal, resource and operation:

- ``RefusalWatch``, a filter on kafka-python's connection loggers, remembers
  the last refusal its connections met (it drops nothing: what is printed is
  ``kafka_outages.py``'s business); a client that failed to start asks it
  why (``refusal``);
- ``denied`` words an ACL refusal (a topic, a group, the cluster).

librdkafka's refusals (``client: CONFLUENT_KAFKA``) arrive as error codes on
its messages and are worded by ``librdkafka_refusal``.
"""
import logging
import threading
import time
from typing import Any, Callable, Dict, Optional

from easyonline.core.errors import KafkaAccessError

_LOGGERS = ("kafka.net.manager", "kafka.net.connection", "kafka.net.transport")
_TLS_WORDS = ("CERTIFICATE_VERIFY_FAILED", "certificate verify failed")
_HOST_WORDS = ("Hostname mismatch", "IP address mismatch", "doesn't match")


def _kind(error: BaseException) -> Optional[str]:
    """"sasl", "tls", "closed" (the broker closed a connection it had accepted) or None (not a refusal: an
    outage, a timeout)."""
    text = f"{type(error).__name__}: {error}"
    if "SaslAuthenticationFailed" in text or "Authentication failed" in text:
        return "sasl"
    if any(word in text for word in _TLS_WORDS):
        return "tls"
    if "socket disconnected" in text:
        return "closed"
    return None


class RefusalWatch(logging.Filter):
    """Remembers (when, kind, text) of the last refusal kafka-python's connections logged; passes every record."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.last: Optional[tuple] = None
        self.last_closed: Optional[float] = None  # when an accepted connection was last closed by the broker

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        for arg in args:
            if isinstance(arg, BaseException):
                kind = _kind(arg)
                with self._lock:
                    if kind == "closed":
                        self.last_closed = time.time()
                    elif kind:
                        self.last = (time.time(), kind, str(arg))
        return True

    def since(self, started: float) -> Optional[tuple]:
        with self._lock:
            return self.last if self.last is not None and self.last[0] >= started else None

    def closed_since(self, started: float) -> bool:
        with self._lock:
            return self.last_closed is not None and self.last_closed >= started


WATCH = RefusalWatch()


def install() -> RefusalWatch:
    """Puts ``WATCH`` first on kafka-python's connection loggers (first: a filter before it may drop the record).
    Idempotent; done on import of this module."""
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if WATCH not in logger.filters:
            logger.filters.insert(0, WATCH)
    return WATCH


install()


def setting(where: str, key: str) -> str:
    """How an operator names setting ``key`` of ``where``: ``kafka_train_input.config[ssl_cafile]``, or
    ``--kafka_config ssl_cafile=...`` for a command-line flag."""
    return f"{where} {key}=..." if where.startswith("--") else f"{where}[{key}]"


def user_of(settings: Dict[str, Any]) -> str:
    """The SASL user of kafka-python settings (librdkafka's ``sasl.username`` too); "" without SASL."""
    return str(settings.get("sasl_plain_username") or settings.get("sasl.username") or "")


def principal(settings: Dict[str, Any]) -> str:
    """The principal the broker's ACLs see: ``User:<sasl user>`` (``User:ANONYMOUS`` without SASL)."""
    return f"User:{user_of(settings) or 'ANONYMOUS'}"


def worded(kind: str, detail: str, settings: Dict[str, Any], server: str, where: str) -> KafkaAccessError:
    """The error of a refusal of ``kind`` ("sasl" or "tls") by the brokers at ``server``."""
    if kind == "sasl":
        mechanism = settings.get("sasl_mechanism") or settings.get("sasl.mechanisms") or settings.get(
            "sasl.mechanism") or "PLAIN"
        return KafkaAccessError(
            f"Kafka at {server} refused user {user_of(settings)!r}: authentication failed (SASL mechanism "
            f"{mechanism}); check {setting(where, 'sasl_plain_username')} and "
            f"{setting(where, 'sasl_plain_password')} (the broker said: {detail.split(': ')[-1]})")
    cafile = settings.get("ssl_cafile") or settings.get("ssl.ca.location") or "(the system's CAs)"
    if any(word in detail for word in _HOST_WORDS):
        why = f"its certificate does not name the host dialled ({server})"
    else:
        why = f"its certificate is not signed by a CA in {setting(where, 'ssl_cafile')} ({cafile})"
    return KafkaAccessError(f"certificate verify failed for the Kafka broker at {server}: {why} "
                            f"(TLS said: {detail.split('] ')[-1].split(' (_ssl')[0]})")


def started_client(client_class: Callable[..., Any], **settings) -> Any:
    """``client_class(**settings)`` (a kafka-python KafkaConsumer, KafkaProducer or KafkaAdminClient); when the
    constructor fails, it also stops the IO thread the client had started. kafka-python 3 starts a client's
    network thread (``kafka-io-<client_id>``) before it bootstraps, and a failed bootstrap leaves that thread
    running, reconnecting for ever: a server retrying through an outage gathered one per attempt."""
    before = set(threading.enumerate())
    try:
        return client_class(**settings)
    except BaseException:
        name = f"kafka-io-{settings.get('client_id', '')}"
        for thread in set(threading.enumerate()) - before:
            loop = getattr(getattr(thread, "_target", None), "__self__", None)  # (the thread runs loop.run_forever)
            if thread.name.startswith(name) and hasattr(loop, "stop"):
                loop.stop(timeout_ms=2000)
        raise


def refusal(started: float, settings: Dict[str, Any], server: str, where: str) -> Optional[KafkaAccessError]:
    """The refusal a kafka-python client started at ``started`` met, worded; None when it met none (an outage).

    A SASL client whose every connection the brokers accepted and then closed, with no refusal read, was
    refused too: Kafka closes a connection after a failed login, and kafka-python's TLS transport sometimes
    loses the error answer sent just before the close (seen on Apache Kafka 4.1 with SCRAM-SHA-512 in about
    1 of 12 failed bootstraps, every retry of that client alike)."""
    last = WATCH.since(started)
    if last is not None:
        return worded(last[1], last[2], settings, server, where)
    if str(settings.get("security_protocol", "")).upper().startswith("SASL") and WATCH.closed_since(started):
        return worded("sasl", "it closed every connection during authentication", settings, server, where)
    return None


def denied(settings: Dict[str, Any], operation: str, resource: str, name: str, where: str,
           server: str = "") -> KafkaAccessError:
    """An ACL refusal: ``User:x may not READ topic t``, with where the name comes from."""
    at = f" at {server}" if server else ""
    return KafkaAccessError(f"Kafka{at} refused: {principal(settings)} may not {operation} {resource} {name} "
                            f"({where}); an ACL must allow it (see docs/operations.md, ACLs each role needs)")


# librdkafka's error names of refusals (confluent_kafka.KafkaError), and what each one is.
LIBRDKAFKA_REFUSALS = {"_AUTHENTICATION": "sasl", "SASL_AUTHENTICATION_FAILED": "sasl", "_SSL": "tls",
                       "TOPIC_AUTHORIZATION_FAILED": "topic", "GROUP_AUTHORIZATION_FAILED": "group",
                       "CLUSTER_AUTHORIZATION_FAILED": "cluster"}


def librdkafka_refusal(error, settings: Dict[str, Any], server: str, where: str, topic: str,
                       group: str) -> Optional[KafkaAccessError]:
    """A confluent_kafka.KafkaError that is a refusal, worded (None: another error)."""
    kind = LIBRDKAFKA_REFUSALS.get(error.name())
    if kind is None:
        return None
    if kind == "topic":
        return denied(settings, "READ", "topic", topic, f"{where}.topic", server)
    if kind == "group":
        return denied(settings, "READ", "group", group, f"{where}.group", server)
    if kind == "cluster":
        return denied(settings, "an operation on", "the cluster", "", where, server)
    detail = error.str()
    if kind == "tls" and not any(word in detail for word in _TLS_WORDS):
        return None  # another TLS problem (a reset): an outage
    return worded(kind, detail, settings, server, where)
