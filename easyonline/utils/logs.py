"""Log format of every easyonline command: time, level, logger, message."""
import logging
import sys


class _DropCancelled(logging.Filter):
    """kafka-python logs a request cancelled by closing its own client as an error (2.0: "Fetch to node N
    failed: Cancelled"; 3.0: "Metadata refresh: failed Cancelled"): every run that closes a consumer or
    producer would end on what looks like a failure."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Cancelled" not in record.getMessage()


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
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    logging.getLogger("absl").setLevel(logging.WARNING)  # TensorFlow's checkpoint chatter ("Sharding callback ...")
