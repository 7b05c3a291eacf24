"""Building blocks shared by the models: an MLP tower (its ``dice`` activation), the FM interaction and MMoE's
experts. DIN's target attention is target_attention.py, MultiTowerBST's transformer sequence_transformer.py."""
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
        vector = fm_vector(embeddings)
        return vector if per_dim else tf.reduce_sum(vector, axis=1)


@tf.custom_gradient
def fm_vector(embeddings: tf.Tensor) -> Any:
    """[B, k]: 0.5 * ((sum_f v_f)^2 - sum_f v_f^2) of ``embeddings`` [B, F, k], with its gradient written out:
    d/dv_f = sum v - v_f. Derived by TensorFlow, the gradient broadcast both sums back to [B, F, k] and added
    them (BroadcastTo was 4% of DeepFM's step, tools/bench/step_profile.py)."""
    summed = tf.reduce_sum(embeddings, axis=1)
    vector = 0.5 * (tf.square(summed) - tf.reduce_sum(tf.square(embeddings), axis=1))

    def gradient(upstream: tf.Tensor) -> tf.Tensor:
        return upstream[:, None, :] * (summed[:, None, :] - embeddings)

    return vector, gradient


def gate_layer(units: int, l2: float, seed: int, name: str) -> tf.keras.layers.Layer:
    """A gate over ``units`` experts: a linear layer whose softmax weighs them (see ``softmax_mix``)."""
    return tf.keras.layers.Dense(units, kernel_regularizer=tf.keras.regularizers.l2(l2) if l2 > 0 else None,
                                 kernel_initializer=tf.keras.initializers.GlorotUniform(seed=seed), name=name)


def softmax_mix(gate: tf.keras.layers.Layer, x: tf.Tensor, stacked: tf.Tensor) -> tf.Tensor:
    """The experts' outputs ``stacked`` [B, E, d] weighted by ``gate``'s softmax over ``x``: [B, d]."""
    return tf.reduce_sum(stacked * tf.expand_dims(tf.nn.softmax(gate(x), axis=1), -1), axis=1)


class ExpertMixture(tf.keras.layers.Layer):
    """MMoE's experts and gates (Ma et al. 2018, EasyRec's ``layers/mmoe.py``): every expert reads the input,
    and each task's input is the mix of the experts' outputs by that task's softmax gate over the input."""

    def __init__(self, experts: Sequence[MLP], num_tasks: int, l2: float = 0.0, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.experts = list(experts)
        self.gates = [gate_layer(len(self.experts), l2, seed + t, f"gate_{t}") for t in range(num_tasks)]

    def call(self, x: tf.Tensor, training: Any = False) -> List[tf.Tensor]:
        """A list of ``num_tasks`` [B, expert width] inputs, one per task."""
        outputs = tf.stack([expert(x, training=training) for expert in self.experts], axis=1)  # [B, E, d]
        return [softmax_mix(gate, x, outputs) for gate in self.gates]
