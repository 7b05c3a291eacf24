"""MultiTowerBST's transformer layer (EasyRec's older BST form). The backbone's BST block is a different network,
EasyRec's newer BSTEncoder (backbone/bst_encoder.py: projections, position embeddings, scaled attention, several
layers): the two are kept apart because EasyRec has both, and each one's checkpoints hold its own variables."""
from typing import Any

from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()


class SequenceTransformer(tf.keras.layers.Layer):
    """BST's transformer layer (Chen et al. 2019; EasyRec's ``MultiTowerBST.bst``) over a behaviour sequence and
    its target: the sequence's first ``seq_len - 1`` positions (zero past each sample's length, padded to that
    many) then the target's keys make ``seq_len`` positions of ``width``. Each of ``heads`` heads reads its own
    ``width / heads`` columns: query, key and value projections (linear, with bias), softmax of q.k over the
    positions (padding masked, so the target alone is attended when the sequence is empty; no scaling, as
    EasyRec), a sum of values; the heads' outputs are concatenated and projected to ``width``, added to the
    input and layer-normalized, then a linear feed-forward layer, added and normalized again. Output: every
    position's vector, flattened to [B, seq_len * width]. No position embedding (EasyRec's MultiTowerBST has
    none): the flattening keeps each position's place."""

    def __init__(self, seq_len: int, heads: int, width: int, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if seq_len < 1 or heads < 1 or width % heads:
            raise ValueError(f"seq_len {seq_len} and heads {heads} must be at least 1, and width {width} a "
                             "multiple of heads")
        self.seq_len, self.heads, self.width = seq_len, heads, width
        self.head_width = width // heads

        def dense(units: int, name: str, offset: int) -> tf.keras.layers.Dense:
            return tf.keras.layers.Dense(units, kernel_initializer=tf.keras.initializers.GlorotUniform(
                seed=seed + offset), name=name)

        self.projections = [[dense(self.head_width, f"head_{h}_{part}", 3 * h + i)
                             for i, part in enumerate(("query", "key", "value"))] for h in range(heads)]
        self.head_output = dense(width, "multi_head_attention", 3 * heads)
        self.feed_forward = dense(width, "feed_forward_net", 3 * heads + 1)
        self.norms = [tf.keras.layers.LayerNormalization(epsilon=1e-6, name=f"add_and_norm_{i}") for i in (1, 2)]

    @property
    def output_width(self) -> int:
        return self.seq_len * self.width

    def call(self, keys: tf.Tensor, sequence: tf.Tensor, lengths: tf.Tensor) -> tf.Tensor:  # pylint: disable=arguments-differ
        """keys [B, width], sequence [B, L, width] (any L), lengths [B] -> [B, seq_len * width]."""
        history = self.seq_len - 1
        sequence = sequence[:, :history]
        sequence = tf.pad(sequence, [[0, 0], [0, history - tf.shape(sequence)[1]], [0, 0]])
        valid = tf.sequence_mask(lengths, history)  # [B, seq_len - 1]
        sequence = tf.where(valid[:, :, None], sequence, tf.zeros_like(sequence))  # padding holds nothing
        inputs = tf.reshape(tf.concat([sequence, keys[:, None, :]], axis=1), [-1, self.seq_len, self.width])
        mask = tf.concat([valid, tf.ones_like(valid[:, :1])], axis=1)[:, None, :]  # [B, 1, seq_len]: keys' mask
        heads = []
        for h, (query, key, value) in enumerate(self.projections):
            part = inputs[:, :, h * self.head_width:(h + 1) * self.head_width]
            scores = tf.matmul(query(part), key(part), transpose_b=True)  # [B, seq_len, seq_len]
            scores = tf.where(tf.broadcast_to(mask, tf.shape(scores)), scores, tf.fill(tf.shape(scores), -2.0**32 + 1))
            heads.append(tf.matmul(tf.nn.softmax(scores, axis=-1), value(part)))
        attended = self.norms[0](inputs + self.head_output(tf.concat(heads, axis=2)))
        output = self.norms[1](attended + self.feed_forward(attended))
        return tf.reshape(output, [-1, self.output_width])
