"""kafka-python's errors about requests its own close cancelled are dropped from every command's log; its
other errors are kept."""
import logging

from easyonline.utils.logs import setup_logging


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_closing_races_are_dropped_and_other_kafka_errors_kept():
    setup_logging()
    collect = _Collect()
    logging.getLogger().addHandler(collect)
    try:
        cluster = logging.getLogger("kafka.cluster")
        for message in ("Metadata refresh: failed Cancelled", "Metadata refresh: failed Transport closed for writes",
                        "Metadata refresh: failed UnknownTopicOrPartitionError"):
            cluster.error(message)
        logging.getLogger("kafka.consumer.fetcher").error("Fetch to node 0 failed: Cancelled")
    finally:
        logging.getLogger().removeHandler(collect)
    assert collect.messages == ["Metadata refresh: failed UnknownTopicOrPartitionError"]
