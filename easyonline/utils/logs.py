"""Log format of every easyonline command: time, level, logger, message."""
import logging
import sys


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname).1s %(name)s] %(message)s", stream=sys.stderr, force=True)
    logging.getLogger("kafka").setLevel(logging.ERROR)
    # kafka-python logs every failed connect attempt; easyonline reports outages itself, once a minute.
    logging.getLogger("kafka.conn").setLevel(logging.CRITICAL)
    logging.getLogger("kafka.client").setLevel(logging.CRITICAL)
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
