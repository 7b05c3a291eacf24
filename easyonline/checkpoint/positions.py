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
from typing import Callable, Dict, Optional

from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()


def encode_positions(positions: Dict[int, int], topic: str = "", topic_id: str = "") -> str:
    """{partition: offset} of ``topic`` as the checkpoint's JSON text (the topic tells a restart which stream;
    ``topic_id``, Kafka's id of the topic, whether it is still the same topic or one created again under
    the name; left out when unknown)."""
    value: dict = {"topic": topic, "offsets": {str(k): int(v) for k, v in sorted(positions.items())}}
    if topic_id:
        value["topic_id"] = topic_id
    return json.dumps(value)


def _decode(text) -> dict:
    value = json.loads(text.decode() if isinstance(text, bytes) else text)
    return value if "offsets" in value else {"topic": "", "offsets": value}  # (written before topics were saved)


def decode_positions(text) -> Dict[int, int]:
    """The {partition: offset} of ``encode_positions``'s text (bytes or str)."""
    return {int(k): int(v) for k, v in _decode(text)["offsets"].items()}


def decode_topic(text) -> str:
    """The topic of ``encode_positions``'s text; "" if unknown (a checkpoint from before topics were saved)."""
    return str(_decode(text)["topic"])


def decode_topic_id(text) -> str:
    """The topic id of ``encode_positions``'s text; "" if unknown (a checkpoint from before ids were saved)."""
    return str(_decode(text).get("topic_id", ""))


class StreamPositions:
    """{partition: next offset to read} and the topic, held in a checkpointable string variable.

    The one positions variable of both step engines: made eagerly in a single process; made while a
    graph is the default (between-graph replication, distributed/train_graph.py), it also gets an
    assign op fed by a placeholder, and its reads and writes go through ``run`` (``session.run``),
    given by ``bind`` once the session exists.
    """

    def __init__(self):
        self.variable = tf.Variable("{}", dtype=tf.string, trainable=False, name="stream_positions")
        self._run: Optional[Callable] = None
        self._text_in = self._assign = None
        if not tf.executing_eagerly():
            self._text_in = tf.compat.v1.placeholder(tf.string, [], name="positions_json")
            self._assign = self.variable.assign(self._text_in)

    def bind(self, run: Callable) -> None:
        """Graph mode: how to run the variable's ops (``session.run(fetches, feed_dict)``)."""
        self._run = run

    def _text(self):
        return self.variable.numpy() if self._assign is None else self._session()(self.variable)

    def _session(self) -> Callable:
        if self._run is None:
            raise RuntimeError("StreamPositions in a graph: bind(session.run) first")
        return self._run

    def assign(self, positions: Dict[int, int], topic: str = "", topic_id: str = "") -> None:
        text = encode_positions(positions, topic, topic_id)
        if self._assign is None:
            self.variable.assign(text)
        else:
            self._session()(self._assign, {self._text_in: text})

    def value(self) -> Dict[int, int]:
        return decode_positions(self._text())

    def topic(self) -> str:
        return decode_topic(self._text())

    def topic_id(self) -> str:
        return decode_topic_id(self._text())
