"""Kafka's Uuid (a topic id, KIP-516; a cluster id) in the text form its tools print: URL-safe base64 of the
16 bytes, without padding. One function, so a checkpoint, a log line and a test compare the same strings."""
import base64
import uuid


def kafka_uuid_text(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")
