"""Where an update stream lives (a Kafka topic or a directory), and the one place that opens it.

The trainer publishes through an ``UpdateSink``; serving, the exporter and
``tools.read_updates`` read through an ``UpdateReader``. Which of the two transports is used is decided here only,
from the config (``train_config.incr_save_config``) or from the
``incr_update.txt`` of an export (``StreamLocation.to_info``).
"""
import dataclasses
import os
from typing import Any, Dict, List, Optional, Protocol, Tuple

from easyonline.config.kafka_settings import security_settings, typed_setting
from easyonline.config.secrets import REDACTED
from easyonline.protos import pipeline_pb2
from easyonline.updates.directory_sink import DirectorySink
from easyonline.updates.kafka_sink import KafkaSink
from easyonline.updates.readers import DirectoryUpdateReader, KafkaUpdateReader

KAFKA, DIRECTORY = "kafka", "fs"


class UpdateSink(Protocol):
    """Publishes encoded update messages in order (KafkaSink, DirectorySink)."""

    description: str
    target: str  # the topic or directory, without the brokers: what a stream's numbering belongs to

    def connect(self) -> None:
        """Opens the transport (creating the topic or directory); may raise."""

    def send(self, messages: List[Tuple[int, bytes]], key: bytes) -> None:
        """Writes (sequence, message) pairs in order; returns once all are durable, else raises."""

    def reset(self) -> None:
        """Drops the connection after a failure; the next send reconnects."""

    def close(self) -> None:
        """Releases the transport."""


class UpdateReader(Protocol):
    """Reads raw update messages with their position (Kafka offset, or sequence for a directory)."""

    def poll(self, timeout_ms: int = 500) -> List[Tuple[int, bytes]]:
        """What arrived since the last call (may block up to ``timeout_ms`` on Kafka)."""

    def read_available(self) -> List[Tuple[int, bytes]]:
        """Everything from the current position to the end of the stream now."""

    def lag_messages(self) -> Optional[int]:
        """Messages there but not yet read (None when unknown)."""

    def start_at_step(self, model_name: str, step: int) -> Tuple[int, int, Optional[int]]:
        """(position, sequence, stream id) of the first message of ``model_name`` stamped ``step`` or later:
        the first a model exported from a checkpoint of that step applies."""

    def lost_before_start(self) -> Optional[str]:
        """Why messages from the reader's start on are gone (retention), None when none are."""

    def close(self) -> None:
        """Releases the reader."""


def kafka_security(incr: pipeline_pb2.IncrSaveConfig) -> Dict[str, Any]:
    """The SASL/SSL settings of ``incr_save_config.kafka.config`` (``${NAME}`` resolved; values redacted in
    an export's pipeline.config are left out, for ``serve --kafka_config`` to give)."""
    path = "train_config.incr_save_config.kafka.config"
    raw = security_settings({key: value for key, value in incr.kafka.config.items() if value != REDACTED})
    return {key: typed_setting(value, f"{path}[{key}]") for key, value in raw.items()}


@dataclasses.dataclass(frozen=True)
class StreamLocation:
    """A Kafka topic (``server``, ``topic``, and ``client_settings`` for its readers, e.g. SASL/SSL, never
    written to an export) or a directory (``directory``)."""

    storage: str
    server: str = ""
    topic: str = ""
    directory: str = ""
    client_settings: Tuple[Tuple[str, Any], ...] = ()

    @classmethod
    def from_config(cls, incr: pipeline_pb2.IncrSaveConfig) -> "StreamLocation":
        if incr.WhichOneof("storage") == "kafka":
            return cls(KAFKA, server=incr.kafka.server, topic=incr.kafka.topic,
                       client_settings=tuple(sorted(kafka_security(incr).items())))
        return cls(DIRECTORY, directory=incr.fs.incr_save_dir)

    def with_settings(self, settings: Dict[str, Any]) -> "StreamLocation":
        """This location, its readers taking ``settings`` (kafka-python consumer kwargs) over its own."""
        merged = {**dict(self.client_settings), **settings}
        return dataclasses.replace(self, client_settings=tuple(sorted(merged.items())))

    @classmethod
    def from_info(cls, info: dict) -> Optional["StreamLocation"]:
        """From an export's incr_update.txt; None when it names no stream."""
        if info.get("storage") == KAFKA:
            return cls(KAFKA, server=info["server"], topic=info["topic"])
        if info.get("storage") == DIRECTORY:
            return cls(DIRECTORY, directory=info["incr_save_dir"])
        return None

    def to_info(self) -> dict:
        if self.storage == KAFKA:
            return {"storage": KAFKA, "server": self.server, "topic": self.topic}
        return {"storage": DIRECTORY, "incr_save_dir": self.directory}

    @property
    def description(self) -> str:
        return f"kafka topic {self.topic} at {self.server}" if self.storage == KAFKA else f"directory {self.directory}"


def default_model_name(model_dir: str) -> str:
    """The update stream's model name when the config gives none: the model_dir's last component."""
    path = model_dir.replace("oss://", "", 1).rstrip("/")
    return os.path.basename(path) if path else "model"


def stream_model_name(incr: pipeline_pb2.IncrSaveConfig, model_dir: str) -> str:
    return incr.model_name or default_model_name(model_dir)


def open_sink(incr: pipeline_pb2.IncrSaveConfig) -> UpdateSink:
    """The sink ``incr_save_config`` names: a Kafka topic or a directory (with its retention)."""
    if incr.WhichOneof("storage") == "kafka":
        return KafkaSink(incr.kafka, incr.max_message_bytes)
    return DirectorySink(incr.fs.incr_save_dir, incr.fs.retention_messages, incr.fs.retention_secs)


def open_reader(location: StreamLocation, start: int = 0, stream_id: Optional[int] = None) -> UpdateReader:
    """A reader of ``location`` from ``start``: a Kafka offset, or a sequence number for a directory (of the
    stream ``stream_id`` there; None: of any stream)."""
    if location.storage == KAFKA:
        return KafkaUpdateReader(location.server, location.topic, start_offset=start, extra=dict(location.client_settings))
    return DirectoryUpdateReader(location.directory, start_sequence=max(start, 1), stream_id=stream_id)
