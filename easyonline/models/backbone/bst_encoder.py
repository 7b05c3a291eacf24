"""EasyRec's BST layer of a backbone (Chen et al. 2019, "Behavior Sequence Transformer"): a BERT encoder over
the target item and the behaviour sequence.

Unlike MultiTowerBST's one-layer ``SequenceTransformer`` (EasyRec's older form), this is EasyRec's
``BSTEncoder``: inputs wider or narrower than ``hidden_size`` are projected to it (dense, relu); the target is
one more position, at the head or the tail (left out with ``ignore``, or without target features: then
``reserve_target_position`` adds nothing, and the first position is the most recent behaviour's, as EasyRec's
output reads it); learnt position embeddings are added, then layer norm and dropout, and
``num_hidden_layers`` transformer layers (scaled multi-head self-attention over the valid positions,
feed-forward ``intermediate_size`` with ``hidden_act``, each with dropout, a residual and layer norm). The
output is every position's vector flattened (``output_all_token_embeddings``: the sequence cut or
zero-padded to ``max_position_embeddings`` positions) or the first position's (a tail target's: its own).
"""
import math
from typing import Any, Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()

_EPSILON = 1e-12  # BERT's layer norm


def _gelu(x: tf.Tensor) -> tf.Tensor:
    return 0.5 * x * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * tf.pow(x, 3))))


_ACTIVATIONS = {"gelu": _gelu, "relu": tf.nn.relu, "tanh": tf.tanh, "swish": tf.nn.swish}


class BSTEncoder(tf.keras.layers.Layer):
    """``call(sequence [B, L, seq_width], lengths [B], target [B, target_width] or None)`` -> [B, output_width].

    ``target_width`` 0: no target features (the target position, if kept, is then left out too)."""

    def __init__(self, settings: pipeline_pb2.BSTEncoder, seq_width: int, target_width: int, l2: float = 0.0,
                 seed: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.settings = settings
        self.hidden = settings.hidden_size
        self.heads = settings.num_attention_heads
        self.max_positions = settings.max_position_embeddings
        self.keep_target = target_width > 0 and settings.target_item_position in ("head", "tail")
        self.positions = self.max_positions + (1 if self.keep_target else 0)
        regularizer = tf.keras.regularizers.l2(l2) if l2 > 0 else None
        self._offset = 0

        def dense(units: int, name: str, activation: Optional[str] = None) -> tf.keras.layers.Dense:
            self._offset += 1
            return tf.keras.layers.Dense(units, activation=activation, kernel_regularizer=regularizer, name=name,
                                         kernel_initializer=tf.keras.initializers.TruncatedNormal(
                                             stddev=settings.initializer_range, seed=seed + self._offset))

        self.seq_project = dense(self.hidden, "seq_project", "relu") if seq_width != self.hidden else None
        self.target_project = dense(self.hidden, "target_project", "relu") \
            if self.keep_target and target_width != self.hidden else None
        self.embed_norm = tf.keras.layers.LayerNormalization(epsilon=_EPSILON, name="embedding_norm")
        self.dropout = tf.keras.layers.Dropout(settings.hidden_dropout_prob, seed=seed)
        self.attention_dropout = tf.keras.layers.Dropout(settings.attention_probs_dropout_prob, seed=seed + 1)
        self.act = _ACTIVATIONS[settings.hidden_act]
        self.layers_ = []
        for i in range(settings.num_hidden_layers):
            self.layers_.append({
                "query": dense(self.hidden, f"layer_{i}_query"), "key": dense(self.hidden, f"layer_{i}_key"),
                "value": dense(self.hidden, f"layer_{i}_value"),
                "attention_output": dense(self.hidden, f"layer_{i}_attention_output"),
                "attention_norm": tf.keras.layers.LayerNormalization(epsilon=_EPSILON, name=f"layer_{i}_attention_norm"),
                "intermediate": dense(settings.intermediate_size, f"layer_{i}_intermediate"),
                "output": dense(self.hidden, f"layer_{i}_output"),
                "output_norm": tf.keras.layers.LayerNormalization(epsilon=_EPSILON, name=f"layer_{i}_output_norm")})
        self._seed = seed

    def build(self, input_shape: Any) -> None:  # (None when call builds it)
        if self.settings.use_position_embeddings:
            self.position_embeddings = self.add_weight(
                name="position_embeddings", shape=[self.positions, self.hidden],
                initializer=tf.keras.initializers.TruncatedNormal(stddev=self.settings.initializer_range,
                                                                  seed=self._seed + 999))
        super().build(input_shape)

    @property
    def output_width(self) -> int:
        return self.positions * self.hidden if self.settings.output_all_token_embeddings else self.hidden

    def call(self, sequence: tf.Tensor, lengths: tf.Tensor, target: Optional[tf.Tensor] = None,  # pylint: disable=arguments-differ
             training: Any = False) -> tf.Tensor:
        if not self.built:
            self.build(None)
        batch = tf.shape(sequence)[0]
        sequence = sequence[:, :self.max_positions]  # (the most recent first: the oldest are cut)
        lengths = tf.minimum(tf.cast(lengths, tf.int32), self.max_positions)
        tail = self.keep_target and self.settings.target_item_position == "tail"
        if self.settings.output_all_token_embeddings or tail:  # a fixed number of positions: to flatten, or for
            # the tail target's position (and its embedding) not to depend on the batch's longest history
            sequence = tf.pad(sequence, [[0, 0], [0, self.max_positions - tf.shape(sequence)[1]], [0, 0]])
        elif not self.keep_target:  # (a batch of empty histories: one padding position to read)
            sequence = tf.pad(sequence, [[0, 0], [0, tf.maximum(1 - tf.shape(sequence)[1], 0)], [0, 0]])
        valid = tf.sequence_mask(lengths, tf.shape(sequence)[1])
        if self.seq_project is not None:
            sequence = self.seq_project(sequence)
        extra = None
        if self.keep_target:
            extra = self.target_project(target) if self.target_project is not None else target
        if extra is not None:
            ones = tf.ones([batch, 1], dtype=tf.bool)
            if self.settings.target_item_position == "tail":
                sequence, valid = tf.concat([sequence, extra[:, None, :]], 1), tf.concat([valid, ones], 1)
            else:
                sequence, valid = tf.concat([extra[:, None, :], sequence], 1), tf.concat([ones, valid], 1)
        length = tf.shape(sequence)[1]
        x = sequence
        if self.settings.use_position_embeddings:
            x += self.position_embeddings[None, :length, :]
        x = self.dropout(self.embed_norm(x), training=training)
        bias = (1.0 - tf.cast(valid, tf.float32))[:, None, None, :] * -10000.0  # [B, 1, 1, L]: keys' mask
        width = self.hidden // self.heads
        for layer in self.layers_:
            def split(t: tf.Tensor) -> tf.Tensor:  # [B, L, hidden] -> [B, heads, L, width]
                return tf.transpose(tf.reshape(t, [batch, length, self.heads, width]), [0, 2, 1, 3])
            query, key, value = (split(layer[n](x)) for n in ("query", "key", "value"))
            scores = tf.matmul(query, key, transpose_b=True) / math.sqrt(width) + bias
            probs = self.attention_dropout(tf.nn.softmax(scores, axis=-1), training=training)
            context = tf.reshape(tf.transpose(tf.matmul(probs, value), [0, 2, 1, 3]), [batch, length, self.hidden])
            attended = layer["attention_norm"](
                x + self.dropout(layer["attention_output"](context), training=training))
            x = layer["output_norm"](attended + self.dropout(
                layer["output"](self.act(layer["intermediate"](attended))), training=training))
        if self.settings.output_all_token_embeddings:
            return tf.reshape(x, [-1, self.output_width])
        position = -1 if self.settings.target_item_position == "tail" else 0
        return tf.reshape(x[:, position, :], [-1, self.hidden])
