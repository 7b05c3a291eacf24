"""The Kafka positions saved inside every checkpoint, next to the parameters they produced.

They are a string variable of the same ``tf.train.Checkpoint`` as the model,
so TensorFlow writes them atomically with the parameters (the ``checkpoint``
state file names a checkpoint only after its data and index files exist);
EasyRec keeps them in a side file instead, which a crash can leave out of
step. On restart they win over the config's start offsets
(inputs/start_position.py), and they are committed to the consumer group
only after the checkpoint is safe (train/trainer.py ``save_checkpoint``).
"""
import json
from typing import Dict

from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()


def encode_positions(positions: Dict[int, int], topic: str = "") -> str:
    """{partition: offset} of ``topic`` as the checkpoint's JSON text (the topic tells a restart which stream)."""
    return json.dumps({"topic": topic, "offsets": {str(k): int(v) for k, v in sorted(positions.items())}})


def _decode(text) -> dict:
    value = json.loads(text.decode() if isinstance(text, bytes) else text)
    return value if "offsets" in value else {"topic": "", "offsets": value}  # (written before topics were saved)


def decode_positions(text) -> Dict[int, int]:
    """The {partition: offset} of ``encode_positions``'s text (bytes or str)."""
    return {int(k): int(v) for k, v in _decode(text)["offsets"].items()}


def decode_topic(text) -> str:
    """The topic of ``encode_positions``'s text; "" if unknown (a checkpoint from before topics were saved)."""
    return str(_decode(text)["topic"])


class StreamPositions:
    """{partition: next offset to read} and the topic, held in a checkpointable string variable."""

    def __init__(self):
        self.variable = tf.Variable("{}", dtype=tf.string, trainable=False, name="stream_positions")

    def assign(self, positions: Dict[int, int], topic: str = "") -> None:
        self.variable.assign(encode_positions(positions, topic))

    def value(self) -> Dict[int, int]:
        return decode_positions(self.variable.numpy())

    def topic(self) -> str:
        return decode_topic(self.variable.numpy())
