"""Where predictions go: a file, or a Kafka topic. One line per scored sample: ``<prediction>\\t<sample>``,
with one prediction column per task (``<probs_ctr>\\t<y_watch>\\t<sample>``, in task order).

The sample is the input line as the parser read it (CSV in input_fields
order; a JSON or custom record is shown in that CSV form), so a prediction
can be joined back to its input.
"""
import abc
import os
import tempfile
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from kafka import KafkaProducer

from easyonline.config.kafka_settings import bootstrap_servers, connect_timeout
from easyonline.utils import fileio


def prediction_lines(columns: Sequence[np.ndarray], lines: Optional[List[bytes]]) -> List[bytes]:
    """One line per sample: each column's value (``%.6f``), tab-separated, then the sample when given."""
    values = [b"\t".join(b"%.6f" % v for v in row) for row in zip(*columns)]
    if lines is None:
        return values
    return [b"%s\t%s" % (v, line) for v, line in zip(values, lines)]


class PredictionSink(abc.ABC):
    @abc.abstractmethod
    def write(self, lines: List[bytes]) -> None:
        pass

    def close(self) -> None:
        pass


class FileSink(PredictionSink):
    """Writes to a local file; an ``oss://`` path is written locally, then uploaded whole at close."""

    def __init__(self, path: str):
        self.path = path
        if fileio.is_oss(path):
            fd, self._local = tempfile.mkstemp(prefix="easyonline-predict-")
            self._file = os.fdopen(fd, "wb")
        else:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._local = None
            self._file = open(path, "wb")

    def write(self, lines: List[bytes]) -> None:
        for line in lines:
            self._file.write(line + b"\n")

    def close(self) -> None:
        self._file.close()
        if self._local is not None:
            with open(self._local, "rb") as f:
                fileio.write_bytes_atomic(self.path, f.read())
            os.remove(self._local)


class TopicSink(PredictionSink):
    """One message per prediction; ``close`` waits until the in-sync replicas acknowledged every one (acks=all,
    idempotent: a leader that dies loses and duplicates none), or raises. The topic is not created here."""

    def __init__(self, server: str, topic: str, settings: Optional[Dict[str, Any]] = None):
        """``settings``: SASL/SSL settings of the connection (kafka-python producer kwargs)."""
        self.topic = topic
        self._producer = KafkaProducer(bootstrap_servers=bootstrap_servers(server), acks="all", linger_ms=20,
                                       **connect_timeout(10000), client_id="easyonline-predict",
                                       **(settings or {}))
        self._futures = []
        self.sent = 0

    def write(self, lines: List[bytes]) -> None:
        self._futures.extend(self._producer.send(self.topic, value=line) for line in lines)
        if len(self._futures) > 100000:
            self._settle()

    def _settle(self) -> None:
        self._producer.flush(timeout=60)
        failed = [f.exception for f in self._futures if f.failed()]
        if failed or any(not f.is_done for f in self._futures):
            raise RuntimeError(f"{len(failed) or 'some'} prediction(s) could not be sent to topic {self.topic}: "
                               f"{failed[0] if failed else 'timed out'}")
        self.sent += len(self._futures)
        self._futures = []

    def close(self) -> None:
        try:
            self._settle()
        finally:
            self._producer.close(timeout=10)
