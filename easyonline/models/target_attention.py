"""DIN's target attention over a behaviour sequence: what DIN, MultiTowerDIN, every model's sequence groups and
the backbone's DIN block pool a history with."""
from typing import Any, Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.models.layers import MLP

tf = ensure_legacy_keras()


class TargetAttention(tf.keras.layers.Layer):
    """DIN's target attention (Zhou et al. 2018; EasyRec's ``target_attention``): for each position of a behaviour
    sequence, ``hidden`` then ``score`` (one linear unit) over [q, k, q - k, q * k] (q: the target's keys, k: the
    position's embedding) give a score; scores become weights over the sample's positions (``softmax``, padding
    excluded, or ``sigmoid`` of score / sqrt(width), padding 0) and the sequence is summed by them.

    Keys narrower than the sequence are zero-padded (``transform="pad"``) or both are projected to the sequence's
    width (``"dense"``). Output: [pooled sequence, pooled aux sequences, keys if ``need_key``], ``output_width`` wide.
    """

    def __init__(self, hidden: MLP, score: tf.keras.layers.Layer, normalizer: str, need_key: bool, key_width: int,
                 seq_width: int, aux_width: int = 0, transform: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if normalizer not in ("softmax", "sigmoid"):
            raise ValueError(f"attention_normalizer {normalizer!r} is not softmax or sigmoid")
        self.hidden, self.score = hidden, score
        self.normalizer, self.need_key = normalizer, need_key
        self.key_width, self.seq_width, self.aux_width = key_width, seq_width, aux_width
        self.transform = transform
        if transform == "dense":
            self.key_projection = tf.keras.layers.Dense(seq_width, name="sequence_key_transform_layer")
            self.seq_projection = tf.keras.layers.Dense(seq_width, name="sequence_fea_transform_layer")

    @property
    def output_width(self) -> int:
        return self.seq_width + self.aux_width + (self.seq_width if self.need_key else 0)

    def call(self, keys: tf.Tensor, sequence: tf.Tensor, lengths: tf.Tensor,  # pylint: disable=arguments-differ
             aux: Optional[tf.Tensor] = None, training: Any = False) -> tf.Tensor:
        if self.transform == "pad":
            keys = tf.pad(keys, [[0, 0], [0, self.seq_width - self.key_width]])
        elif self.transform == "dense":
            keys, sequence = self.key_projection(keys), self.seq_projection(sequence)
        length = tf.shape(sequence)[1]
        queries = tf.tile(keys[:, None, :], tf.stack([1, length, 1]))
        scores = self.score(self.hidden(tf.concat([queries, sequence, queries - sequence, queries * sequence], -1),
                                        training=training))[:, :, 0]  # [B, L]
        mask = tf.sequence_mask(lengths, length)
        if self.normalizer == "softmax":
            weights = tf.nn.softmax(tf.where(mask, scores, tf.fill(tf.shape(scores), -2.0**32 + 1)), axis=1)
        else:
            weights = tf.where(mask, tf.sigmoid(scores / self.seq_width ** 0.5), tf.zeros_like(scores))
        parts = [tf.reduce_sum(weights[:, :, None] * sequence, axis=1)]
        if aux is not None:
            parts.append(tf.reduce_sum(weights[:, :, None] * aux, axis=1))
        if self.need_key:
            parts.append(keys)
        return tf.reshape(tf.concat(parts, axis=1), [-1, self.output_width])
