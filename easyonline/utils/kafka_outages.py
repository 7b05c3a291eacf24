"""Folds kafka-python's connection errors into one fact: since when its brokers are unreachable, and why.

While a broker is down, kafka-python 3 logs every failed connect at ERROR
(``E kafka.net.manager] Connection failed: KafkaConnectionError: 111
ECONNREFUSED``, ``... Connection lost``, ``Bootstrap failed``), several
lines a second, for as long as the outage lasts. easyonline reports outages
itself, in its own words and once per status period (serving: ``update
broker 127.0.0.1:9092 unreachable for 42 s (connection refused)``; the
update publisher: its error line, once a minute), so ``ConnectionWatch``, a
filter on kafka-python's connection loggers, drops those records and keeps
only what the report needs: when the failures began and the last reason. A
connection that completes (kafka-python's ``Connected``, logged at INFO,
which the filter sees and drops too) ends the outage. A broker that holds its
connections open and answers nothing (frozen, overloaded) shows as requests
timing out, the fetches and metadata refreshes each one ERROR line: folded
too (reason ``timed out``). Other records (an
authentication failure, a protocol error) pass as before.

The state is per process (kafka-python's records do not say which client
they are from); an easyonline process has one kafka-python client per
broker address it reports on (the serving process: the update follower; the
trainer: the update publisher; data is read in a child process).
"""
import logging
import re
import threading
import time
from typing import Optional, Tuple

# kafka-python 3's loggers that report connections (2.x's kafka.conn and kafka.client are silenced whole).
CONNECTION_LOGGERS = ("kafka.net.manager", "kafka.net.connection", "kafka.net.transport")
# Format strings (record.msg) of failed connections; the f-string one is matched by its start.
_FAILED = ("Connection failed: %s", "%s: Connection lost: %s", "Bootstrap failed: %s", "%s: socket disconnected",
           "%s: Request timed out after %d ms. Closing connection.", "Bootstrap connection to %s failed: %s "
           "(backoff %.2f secs)", "Bootstrap %s not ready; waiting %.2f secs")
_FAILED_PREFIX = "Bootstrap attempt to "
# A broker that died under an open connection (kafka.net.transport), and the consumer's fetches to it while it is
# down, one a second per consumer (kafka.consumer.fetcher, folded only when the cause is the connection).
_DIED = ("%s: Abort (%s)", "%s: Error receiving network data closing socket")
_FETCH_FAILED = "Fetch to node %s failed: %s"
# and the metadata refreshes that meet the dead broker (kafka.cluster, folded only when the cause is the connection)
_METADATA_FAILED = "Metadata refresh: failed %s"
# Causes of those two that are the connection: refused or lost (KafkaConnectionError), or a broker that holds
# the connection open and answers nothing (frozen, overloaded: RequestTimedOutError, each request's ~10 s
# timeout; serving's log had 14 such E lines in 50 s). Anything else (an authorization error) passes.
_CONNECTION_CAUSES = re.compile(r"Connection|RequestTimedOut|timed out|NodeNotReady|socket disconnected")
CONNECTION_LOGGERS += ("kafka.consumer.fetcher", "kafka.cluster")
_CONNECTED = "%s: Connected"
# What an operator reads for the errors' own words.
_REASONS = ((re.compile(r"ECONNREFUSED|Connection refused", re.I), "connection refused"),
            (re.compile(r"timed out|Timeout", re.I), "timed out"),
            (re.compile(r"EHOSTUNREACH|ENETUNREACH|No route", re.I), "no route to host"),
            (re.compile(r"gaierror|Name or service not known|nodename nor servname", re.I), "unknown host"),
            (re.compile(r"ECONNRESET|reset by peer|socket disconnected", re.I), "connection reset"))


def _reason(record: logging.LogRecord) -> Optional[str]:
    """The cause in a few words, or None when the record names none (a bootstrap giving up, a wait)."""
    if record.msg in ("Bootstrap failed: %s", "Bootstrap %s not ready; waiting %.2f secs"):
        return None
    text = record.getMessage()
    for pattern, words in _REASONS:
        if pattern.search(text):
            return words
    return text.rsplit(": ", 1)[-1][:120] or None


class ConnectionWatch(logging.Filter):
    """Drops kafka-python's connection records, remembering the outage they describe (see the module doc)."""

    def __init__(self) -> None:
        super().__init__()
        self.pass_through = False  # EASYONLINE_LIBRARY_LOGS=1: record, and let kafka-python's errors print too
        self._lock = threading.Lock()
        self._since: Optional[float] = None  # first failure after the last completed connection
        self._last_failure = 0.0
        self._reason: Optional[str] = None

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.msg
        if msg == _CONNECTED:
            with self._lock:
                self._since, self._reason = None, None
            return False
        if msg in _FAILED or msg in _DIED or (isinstance(msg, str) and msg.startswith(_FAILED_PREFIX)) or \
                (msg in (_FETCH_FAILED, _METADATA_FAILED) and _CONNECTION_CAUSES.search(record.getMessage())):
            reason, now = _reason(record), time.time()
            with self._lock:
                if self._since is None:
                    self._since = now
                self._last_failure = now
                self._reason = reason or self._reason
            return self.pass_through and record.levelno >= logging.ERROR
        return record.levelno >= logging.ERROR  # the INFO/WARNING rest stays hidden, as at kafka's ERROR level

    def outage(self) -> Optional[Tuple[float, str]]:
        """(seconds since the first failure, the reason) while no connection completed since; else None."""
        with self._lock:
            if self._since is None:
                return None
            return time.time() - self._since, self._reason or "no answer"


WATCH = ConnectionWatch()


def install(pass_through: bool = False) -> ConnectionWatch:
    """Puts ``WATCH`` on kafka-python's connection loggers (their INFO records reach it: a completed connection
    ends an outage; it passes only ERROR and above of what it does not fold, and with ``pass_through`` the
    connection errors too). Idempotent."""
    WATCH.pass_through = pass_through
    for name in CONNECTION_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO)
        if WATCH not in logger.filters:
            logger.addFilter(WATCH)
    return WATCH


def outage() -> Optional[Tuple[float, str]]:
    """This process's kafka-python outage: (seconds, reason), or None when its connections are fine."""
    return WATCH.outage()
