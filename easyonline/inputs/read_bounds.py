"""Where a partition's readable data ends for a reader: what lag and "caught up" are measured against.

A reader of committed data (``isolation_level: READ_COMMITTED``, the
default) can read up to the partition's last stable offset (LSO): records
past it belong to transactions still open. Below it, commit and abort
markers and aborted batches take offsets that no record handed to the
reader fills; both clients move their position past them, so a reader that
has read everything it can stands exactly at the LSO. Measuring lag against
the high watermark instead left a transactional topic forever "behind" by
its last marker (an offline run never ended) and, while a transaction is
open, by records no read_committed reader may return.

Every Kafka fetch response carries the high watermark, the LSO and the log
start offset. kafka-python keeps only the high watermark, so
``KafkaPythonBounds`` records the other two from the responses its fetcher
parses; librdkafka reports the LSO in its statistics (``ls_offset``), which
``LibrdkafkaBounds`` reads. READ_UNCOMMITTED readers measure against the
high watermark, as before.
"""
import json
import logging
import types
from typing import Dict, Optional, Tuple

log = logging.getLogger(__name__)


class KafkaPythonBounds:
    """The last stable offset and log start of each partition, from the fetch responses of one kafka-python
    consumer (3.0: ``Fetcher._parse_fetched_data``); None until a fetch of that partition answered."""

    def __init__(self, consumer, committed: bool):
        self._consumer = consumer
        self._committed = committed
        self.stable: Dict[Tuple[str, int], int] = {}
        self.log_start: Dict[Tuple[str, int], int] = {}
        fetcher = getattr(consumer, "_fetcher", None)
        parse = getattr(fetcher, "_parse_fetched_data", None)
        if fetcher is None or parse is None:  # another kafka-python: the high watermark only
            log.warning("this kafka-python's fetcher has no _parse_fetched_data: lag is measured against the "
                        "high watermark (a transactional topic shows its last marker as lag)")
            return

        def parse_and_note(fetcher_self, completed_fetch):
            data = completed_fetch.partition_data
            if not getattr(data, "error_code", 0):
                tp = completed_fetch.topic_partition
                key = (tp.topic, tp.partition)
                stable = getattr(data, "last_stable_offset", -1)
                if stable is not None and stable >= 0:
                    self.stable[key] = stable
                start = getattr(data, "log_start_offset", -1)
                if start is not None and start >= 0:
                    self.log_start[key] = start
            return parse(completed_fetch)

        fetcher._parse_fetched_data = types.MethodType(parse_and_note, fetcher)  # pylint: disable=protected-access

    def end(self, tp) -> Optional[int]:
        """Where this reader's readable data of ``tp`` ends: the LSO when reading committed data (the high
        watermark when the broker sent none), else the high watermark; None before a fetch."""
        high = self._consumer.highwater(tp)
        if high is None or not self._committed:
            return high
        stable = self.stable.get((tp.topic, tp.partition))
        return high if stable is None else min(stable, high)


class LibrdkafkaBounds:
    """The same from librdkafka's statistics (``statistics.interval.ms``; ``stats_cb`` runs inside poll)."""

    def __init__(self, topic: str, committed: bool):
        self._topic = topic
        self._committed = committed
        self.stable: Dict[int, int] = {}
        self.high: Dict[int, int] = {}

    def on_stats(self, stats_json: str) -> None:
        try:
            partitions = json.loads(stats_json).get("topics", {}).get(self._topic, {}).get("partitions", {})
        except ValueError:
            return
        for name, values in partitions.items():
            p = int(name)
            if p < 0:  # librdkafka's internal "unassigned" partition
                continue
            if values.get("ls_offset", -1) >= 0:
                self.stable[p] = values["ls_offset"]
            if values.get("hi_offset", -1) >= 0:
                self.high[p] = values["hi_offset"]

    def end(self, partition: int, high: Optional[int]) -> Optional[int]:
        """As KafkaPythonBounds.end, given the cached high watermark; before statistics came, the high
        watermark (so lag errs high, never to a false 0)."""
        if high is None or not self._committed:
            return high
        stable = self.stable.get(partition)
        return high if stable is None else min(stable, high)
