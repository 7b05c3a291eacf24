"""Building blocks shared by the models: an MLP tower (its ``dice`` activation) and the FM interaction."""
from typing import Sequence

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()


class BatchNorm(tf.keras.layers.BatchNormalization):
    """Batch normalization whose moving moments skip an empty batch: the trainer builds every variable with a
    step on an empty batch, whose moments (a mean over no samples) are NaN and would poison the moving
    moments that scoring and serving use."""

    def call(self, inputs, training=None):  # pylint: disable=arguments-differ
        if training is True:
            training = tf.shape(inputs)[0] > 0
        return super().call(inputs, training=training)


class Dice(tf.keras.layers.Layer):
    """DIN's data-adaptive activation (Zhou et al. 2018; EasyRec's ``utils/activation.py`` ``dice``): with
    p = sigmoid(x batch-normalized, without offset or scale, epsilon 1e-9), alpha * (1 - p) * x + p * x, alpha
    a learnt weight per unit starting at 0. Its normalization moves with training, like batch norm's."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.norm = BatchNorm(center=False, scale=False, epsilon=1e-9, name="norm")
        self.alpha = None

    def build(self, input_shape):
        self.alpha = self.add_weight(name="alpha", shape=[int(input_shape[-1])], initializer="zeros")
        super().build(input_shape)

    def call(self, x, training=False):  # pylint: disable=arguments-differ
        p = tf.sigmoid(self.norm(x, training=training))
        return self.alpha * (1.0 - p) * x + p * x


def normalizes(dnn: pipeline_pb2.DNN) -> bool:
    """Whether the DNN's layers normalize over the batch (batch norm, or the dice activation): then its scores
    in training differ from serving's."""
    return dnn.use_bn or dnn.activation == "dice"


def _activation(name: str):
    """The layer of activation ``name`` (dice: a ``Dice``, with weights of its own)."""
    return Dice() if name == "dice" else tf.keras.layers.Activation(name)


class MLP(tf.keras.layers.Layer):
    """Dense layers with optional batch norm and dropout."""

    def __init__(self, hidden_units: Sequence[int], activation: str = "relu", dropout_ratio: float = 0.0,
                 use_bn: bool = False, l2: float = 0.0, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        regularizer = tf.keras.regularizers.l2(l2) if l2 > 0 else None
        self._layers = []
        for i, units in enumerate(hidden_units):
            separate = use_bn or activation == "dice"  # an activation layer after the Dense (and batch norm)
            self._layers.append(tf.keras.layers.Dense(
                units, activation=None if separate else activation, kernel_regularizer=regularizer,
                kernel_initializer=tf.keras.initializers.GlorotUniform(seed=seed + i)))
            if use_bn:
                self._layers.append(BatchNorm())
            if separate:
                self._layers.append(_activation(activation))
            if dropout_ratio > 0:
                self._layers.append(tf.keras.layers.Dropout(dropout_ratio, seed=seed + i))

    def call(self, x, training=False):
        for layer in self._layers:
            x = layer(x, training=training)
        return x


class FMInteraction(tf.keras.layers.Layer):
    """Second-order factorization machine term: 0.5 * ((sum v)^2 - sum v^2), summed over dims
    (``per_dim=True``: the [B, k] vector before that sum, for a final DNN)."""

    def call(self, embeddings, per_dim=False):  # [B, F, k]
        summed = tf.reduce_sum(embeddings, axis=1)
        squared = tf.reduce_sum(tf.square(embeddings), axis=1)
        vector = 0.5 * (tf.square(summed) - squared)
        return vector if per_dim else tf.reduce_sum(vector, axis=1)


class ExpertMixture(tf.keras.layers.Layer):
    """MMoE's experts and gates (Ma et al. 2018, EasyRec's ``layers/mmoe.py``): every expert reads the input,
    and each task's input is the mix of the experts' outputs by that task's softmax gate over the input."""

    def __init__(self, experts: Sequence[MLP], num_tasks: int, l2: float = 0.0, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.experts = list(experts)
        regularizer = tf.keras.regularizers.l2(l2) if l2 > 0 else None
        self.gates = [tf.keras.layers.Dense(len(self.experts), kernel_regularizer=regularizer,
                                            kernel_initializer=tf.keras.initializers.GlorotUniform(seed=seed + t),
                                            name=f"gate_{t}") for t in range(num_tasks)]

    def call(self, x, training=False):
        """A list of ``num_tasks`` [B, expert width] inputs, one per task."""
        outputs = tf.stack([expert(x, training=training) for expert in self.experts], axis=1)  # [B, E, d]
        return [tf.reduce_sum(outputs * tf.expand_dims(tf.nn.softmax(gate(x), axis=1), -1), axis=1)
                for gate in self.gates]
