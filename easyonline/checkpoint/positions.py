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


def encode_positions(positions: Dict[int, int]) -> str:
    """{partition: offset} as the checkpoint's JSON text."""
    return json.dumps({str(k): int(v) for k, v in sorted(positions.items())})


def decode_positions(text) -> Dict[int, int]:
    """The inverse of ``encode_positions`` (bytes or str)."""
    return {int(k): int(v) for k, v in json.loads(text.decode() if isinstance(text, bytes) else text).items()}


class StreamPositions:
    """{partition: next offset to read}, held in a checkpointable string variable."""

    def __init__(self):
        self.variable = tf.Variable("{}", dtype=tf.string, trainable=False, name="stream_positions")

    def assign(self, positions: Dict[int, int]) -> None:
        self.variable.assign(encode_positions(positions))

    def value(self) -> Dict[int, int]:
        return decode_positions(self.variable.numpy())
