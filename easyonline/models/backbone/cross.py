"""EasyRec's Cross layer of a backbone (DCN-v2, Wang et al. 2021), run in a recurrent block as DCN-v2's cross
network: x_{i+1} = x0 * (W x_i + b) + x_i, W full rank."""
from typing import Any, Sequence

from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()


class Cross(tf.keras.layers.Layer):
    """``call([x0, x])`` -> x0 * (W x + b) + x, [B, d]; W [d, d] starts from a truncated normal (Keras's default
    stddev 0.05), as EasyRec's ``Cross`` without settings."""

    def __init__(self, l2: float = 0.0, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._l2, self._seed = l2, seed
        self.dense: Any = None

    def build(self, input_shape: Sequence[tf.TensorShape]) -> None:
        self.dense = tf.keras.layers.Dense(
            int(input_shape[0][-1]), kernel_initializer=tf.keras.initializers.TruncatedNormal(seed=self._seed),
            kernel_regularizer=tf.keras.regularizers.l2(self._l2) if self._l2 > 0 else None, name="dense")
        super().build(input_shape)

    def call(self, inputs: Sequence[tf.Tensor]) -> tf.Tensor:  # pylint: disable=arguments-differ
        x0, x = inputs[0], inputs[1]
        return x0 * self.dense(x) + x
