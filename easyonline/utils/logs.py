"""Log format of every easyonline command: time, level, logger, message."""
import logging
import sys

from easyonline.core.quiet_libraries import library_logs_wanted
from easyonline.utils import kafka_outages


class _DropCancelled(logging.Filter):
    """kafka-python logs a request cancelled by closing its own client as an error (2.0: "Fetch to node N
    failed: Cancelled"; 3.0: "Metadata refresh: failed Cancelled", or "... failed Transport closed for writes"
    when the close wins the race with a refresh in flight): every run that closes a consumer or producer would
    end on what looks like a failure. (A broker that goes away is reported by easyonline's own outage lines.)"""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return "Cancelled" not in message and "Transport closed for writes" not in message


class _BelowWarning(logging.Filter):
    """Drops records below WARNING (set on absl's logger, whose level TensorFlow resets)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


def setup_logging(level: str = "INFO") -> None:
    """Our format on stderr at ``level``; kafka-python and TensorFlow only for errors (run_command calls it for
    every command at INFO before its main, which may call it again with its --log_level)."""
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname).1s %(name)s] %(message)s", stream=sys.stderr, force=True)
    logging.getLogger("kafka").setLevel(logging.ERROR)
    # kafka-python logs every failed connect attempt; easyonline reports outages itself, once a minute.
    logging.getLogger("kafka.conn").setLevel(logging.CRITICAL)
    logging.getLogger("kafka.client").setLevel(logging.CRITICAL)
    for name in ("kafka.consumer.fetcher", "kafka.cluster"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropCancelled) for f in logger.filters):
            logger.addFilter(_DropCancelled())
    # kafka-python 3's connection errors (several a second while a broker is down) are folded into easyonline's
    # own outage lines (serving's status, the publisher's error): kafka_outages.py
    kafka_outages.install(pass_through=library_logs_wanted())
    tf_logger = logging.getLogger("tensorflow")
    # TensorFlow adds a handler of its own when it is imported before logging is set up: its records would
    # print twice, once in its format; through the root handler they print once, in ours.
    for handler in list(tf_logger.handlers):
        if type(handler) is logging.StreamHandler:  # pylint: disable=unidiomatic-typecheck  (not a subclass)
            tf_logger.removeHandler(handler)
    if library_logs_wanted():  # EASYONLINE_LIBRARY_LOGS=1: TensorFlow's and absl's lines as they come
        return
    tf_logger.setLevel(logging.ERROR)
    absl = logging.getLogger("absl")
    absl.setLevel(logging.WARNING)
    # TensorFlow's checkpoint chatter ("Sharding callback ...", "Found untraced functions"): saving resets absl's
    # logger level to INFO (absl.logging.set_verbosity), a filter stays
    if not any(isinstance(f, _BelowWarning) for f in absl.filters):
        absl.addFilter(_BelowWarning())
