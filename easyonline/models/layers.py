"""Building blocks shared by the models: an MLP tower (its ``dice`` activation), the FM interaction, MMoE's
experts, DIN's target attention and BST's transformer layer."""
from typing import Any, List, Optional, Sequence, Union

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()


class BatchNorm(tf.keras.layers.BatchNormalization):
    """Batch normalization whose moving moments skip an empty input: the trainer builds every variable with a
    step on an empty batch, and a batch whose every history is empty gives an attention's layers [B, 0, d];
    their moments (a mean over nothing) are NaN and would poison the moving moments that scoring and serving
    use."""

    def call(self, inputs: tf.Tensor, training: Any = None) -> tf.Tensor:  # pylint: disable=arguments-differ
        if training is True:
            training = tf.size(inputs) > 0
        return super().call(inputs, training=training)


class Dice(tf.keras.layers.Layer):
    """DIN's data-adaptive activation (Zhou et al. 2018; EasyRec's ``utils/activation.py`` ``dice``): with
    p = sigmoid(x batch-normalized, without offset or scale, epsilon 1e-9), alpha * (1 - p) * x + p * x, alpha
    a learnt weight per unit starting at 0. Its normalization moves with training, like batch norm's."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.norm = BatchNorm(center=False, scale=False, epsilon=1e-9, name="norm")
        self.alpha = None

    def build(self, input_shape: tf.TensorShape) -> None:
        self.alpha = self.add_weight(name="alpha", shape=[int(input_shape[-1])], initializer="zeros")
        super().build(input_shape)

    def call(self, x: tf.Tensor, training: Any = False) -> tf.Tensor:  # pylint: disable=arguments-differ
        p = tf.sigmoid(self.norm(x, training=training))
        return self.alpha * (1.0 - p) * x + p * x


def normalizes(dnn: pipeline_pb2.DNN) -> bool:
    """Whether the DNN's layers normalize over the batch (batch norm, or the dice activation): then its scores
    in training differ from serving's."""
    return dnn.use_bn or dnn.activation == "dice"


def _activation(name: str) -> tf.keras.layers.Layer:
    """The layer of activation ``name`` (dice: a ``Dice``, with weights of its own)."""
    return Dice() if name == "dice" else tf.keras.layers.Activation(name)


def initializer_of(name: str, seed: int) -> tf.keras.initializers.Initializer:
    """Keras initializer ``name`` (glorot_uniform, he_uniform, ...) with ``seed`` when it takes one."""
    initializer = tf.keras.initializers.get(name)
    config = initializer.get_config()
    if "seed" in config:
        config["seed"] = seed
    return type(initializer).from_config(config)


class MLP(tf.keras.layers.Layer):
    """Dense layers with optional batch norm and dropout.

    ``dropout_ratio`` is one ratio for every layer or one per layer. The last layer may differ (EasyRec's MLP
    layer: ``final_activation``, ``use_final_bn``, ``use_final_bias``; None: as the others). ``initializer``
    names a Keras initializer, seeded per layer; ``bn_after_activation`` puts batch norm after the activation.
    """

    def __init__(self, hidden_units: Sequence[int], activation: str = "relu",
                 dropout_ratio: Union[float, Sequence[float]] = 0.0, use_bn: bool = False, l2: float = 0.0,
                 seed: int = 0, *, final_activation: Optional[str] = None, use_final_bn: Optional[bool] = None,
                 use_bias: bool = True, use_final_bias: Optional[bool] = None, initializer: str = "glorot_uniform",
                 bn_after_activation: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        regularizer = tf.keras.regularizers.l2(l2) if l2 > 0 else None
        ratios = list(dropout_ratio) if isinstance(dropout_ratio, (list, tuple)) else [dropout_ratio] * len(hidden_units)
        self._layers = []
        for i, units in enumerate(hidden_units):
            last = i == len(hidden_units) - 1
            act = final_activation if last and final_activation is not None else activation
            bn = use_final_bn if last and use_final_bn is not None else use_bn
            bias = use_final_bias if last and use_final_bias is not None else use_bias
            separate = bn or act == "dice"  # an activation layer after the Dense (and batch norm)
            self._layers.append(tf.keras.layers.Dense(
                units, activation=None if separate else act, use_bias=bias, kernel_regularizer=regularizer,
                kernel_initializer=initializer_of(initializer, seed + i)))
            if bn and not bn_after_activation:
                self._layers.append(BatchNorm())
            if separate:
                self._layers.append(_activation(act))
            if bn and bn_after_activation:
                self._layers.append(BatchNorm())
            ratio = ratios[i] if i < len(ratios) else 0.0
            if ratio > 0:
                self._layers.append(tf.keras.layers.Dropout(ratio, seed=seed + i))

    def call(self, x: tf.Tensor, training: Any = False) -> tf.Tensor:
        for layer in self._layers:
            x = layer(x, training=training)
        return x


class FMInteraction(tf.keras.layers.Layer):
    """Second-order factorization machine term: 0.5 * ((sum v)^2 - sum v^2), summed over dims
    (``per_dim=True``: the [B, k] vector before that sum, for a final DNN)."""

    def call(self, embeddings: tf.Tensor, per_dim: bool = False) -> tf.Tensor:  # [B, F, k]
        summed = tf.reduce_sum(embeddings, axis=1)
        squared = tf.reduce_sum(tf.square(embeddings), axis=1)
        vector = 0.5 * (tf.square(summed) - squared)
        return vector if per_dim else tf.reduce_sum(vector, axis=1)


class ExpertMixture(tf.keras.layers.Layer):
    """MMoE's experts and gates (Ma et al. 2018, EasyRec's ``layers/mmoe.py``): every expert reads the input,
    and each task's input is the mix of the experts' outputs by that task's softmax gate over the input."""

    def __init__(self, experts: Sequence[MLP], num_tasks: int, l2: float = 0.0, seed: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.experts = list(experts)
        regularizer = tf.keras.regularizers.l2(l2) if l2 > 0 else None
        self.gates = [tf.keras.layers.Dense(len(self.experts), kernel_regularizer=regularizer,
                                            kernel_initializer=tf.keras.initializers.GlorotUniform(seed=seed + t),
                                            name=f"gate_{t}") for t in range(num_tasks)]

    def call(self, x: tf.Tensor, training: Any = False) -> List[tf.Tensor]:
        """A list of ``num_tasks`` [B, expert width] inputs, one per task."""
        outputs = tf.stack([expert(x, training=training) for expert in self.experts], axis=1)  # [B, E, d]
        return [tf.reduce_sum(outputs * tf.expand_dims(tf.nn.softmax(gate(x), axis=1), -1), axis=1)
                for gate in self.gates]


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
