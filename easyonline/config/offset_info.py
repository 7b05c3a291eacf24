"""The start offsets of ``offset_info``: partition offsets or a timestamp, as JSON.

Its own module because the Kafka reader's child process reads it, and that child should start without
TensorFlow (config/validate.py, which checks every field, imports the model registry).
"""
import json
from typing import Any, Tuple

from easyonline.core.errors import ConfigError, require


def parse_offset_info(offset_info: str, path: str) -> Tuple[str, Any]:
    """Returns ("offsets", {partition: offset}) or ("timestamp", seconds); a bad text raises ConfigError(path)."""
    try:
        value = json.loads(offset_info)
    except json.JSONDecodeError as e:
        raise ConfigError(path, f"not valid JSON ({e}); expected {{\"0\": 5, \"1\": 10}} or {{\"timestamp\": 1650765731}}") from None
    require(isinstance(value, dict) and value, path, "expected a non-empty JSON object")
    if "timestamp" in value:
        require(len(value) == 1, path, "a timestamp start cannot be mixed with partition offsets")
        stamp = value["timestamp"]
        require(isinstance(stamp, (int, float)) and not isinstance(stamp, bool) and 0 <= stamp < 1e11, path,
                "timestamp must be unix seconds >= 0")
        return "timestamp", float(value["timestamp"])
    offsets = {}
    for key, offset in value.items():
        require(str(key).isascii() and str(key).isdigit(), path, f"partition {key!r} is not a non-negative integer")
        require(int(key) not in offsets, path, f"partition {int(key)} is given twice")
        require(isinstance(offset, int) and not isinstance(offset, bool) and offset >= 0, path,
                f"offset of partition {key} must be an integer >= 0, got {offset!r}")
        offsets[int(key)] = offset
    return "offsets", offsets
