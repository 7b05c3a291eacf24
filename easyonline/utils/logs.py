"""Log format of every easyonline command: time, level, logger, message."""
import logging
import sys


class _DropCancelledFetches(logging.Filter):
    """kafka-python logs a fetch cancelled by closing its own consumer as an error ("Fetch to node N failed:
    Cancelled"): every run that closes a consumer would end on what looks like a failure."""

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
    fetcher = logging.getLogger("kafka.consumer.fetcher")
    if not any(isinstance(f, _DropCancelledFetches) for f in fetcher.filters):
        fetcher.addFilter(_DropCancelledFetches())
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    logging.getLogger("absl").setLevel(logging.WARNING)  # TensorFlow's checkpoint chatter ("Sharding callback ...")
