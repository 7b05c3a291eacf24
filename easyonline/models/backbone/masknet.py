"""EasyRec's MaskNet layer of a backbone (Wang et al. 2021, "MaskNet: feature-wise multiplication by an
instance-guided mask"): mask blocks that reweight an input by a mask computed from the features."""
from typing import Any, Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.models.layers import MLP
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()


class MaskBlock(tf.keras.layers.Layer):
    """``call(net, mask_input)`` -> the block's output: ``net`` (layer-normalized with ``input_layer_norm``)
    times weights from ``mask_input`` (an aggregation layer, relu, of ``aggregation_size`` units or
    ``reduction_factor`` times the mask input's width, after a ``projection_dim`` projection when set, then a
    linear layer of ``net``'s width); with ``output_size``, then a linear layer of that many units, layer norm
    and relu."""

    def __init__(self, settings: pipeline_pb2.MaskBlock, width: int, mask_width: int, l2: float = 0.0,
                 seed: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.settings = settings
        regularizer = tf.keras.regularizers.l2(l2) if l2 > 0 else None
        size = int(mask_width * settings.reduction_factor) if settings.HasField("reduction_factor") \
            else settings.aggregation_size
        self.project = tf.keras.layers.Dense(settings.projection_dim, use_bias=False, kernel_regularizer=regularizer,
                                             kernel_initializer=tf.keras.initializers.GlorotUniform(seed=seed),
                                             name="project") if settings.projection_dim else None
        self.aggregate = tf.keras.layers.Dense(size, activation="relu", kernel_regularizer=regularizer,
                                               kernel_initializer=tf.keras.initializers.HeUniform(seed=seed + 1),
                                               name="aggregation")
        self.weigh = tf.keras.layers.Dense(width, name="weights",
                                           kernel_initializer=tf.keras.initializers.GlorotUniform(seed=seed + 2))
        self.input_norm = tf.keras.layers.LayerNormalization(name="input_ln") if settings.input_layer_norm else None
        self.output_dense: Optional[tf.keras.layers.Layer] = None
        if settings.output_size:
            self.output_dense = tf.keras.layers.Dense(settings.output_size, use_bias=False, name="output",
                                                kernel_initializer=tf.keras.initializers.GlorotUniform(seed=seed + 3))
            self.output_norm = tf.keras.layers.LayerNormalization(name="output_ln")

    @property
    def output_width(self) -> int:
        return self.settings.output_size or self.weigh.units

    def call(self, net: tf.Tensor, mask_input: tf.Tensor) -> tf.Tensor:  # pylint: disable=arguments-differ
        if self.input_norm is not None:
            net = self.input_norm(net)
        mask = self.project(mask_input) if self.project is not None else mask_input
        masked = net * self.weigh(self.aggregate(mask))
        if self.output_dense is None:
            return masked
        return tf.nn.relu(self.output_norm(self.output_dense(masked)))


class MaskNet(tf.keras.layers.Layer):
    """``call(x [B, width])``: x layer-normalized (``input_layer_norm``, default true), then the mask blocks,
    side by side over x and concatenated (``use_parallel``, default true) or one after another (each over the
    last one's output, masked by x), then ``mlp`` when set."""

    def __init__(self, settings: pipeline_pb2.MaskNet, mlp: Optional[MLP], l2: float = 0.0, seed: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.settings = settings
        self.input_norm = tf.keras.layers.LayerNormalization(name="input_ln") if settings.input_layer_norm else None
        self.mlp = mlp
        self._l2, self._seed = l2, seed
        self.blocks: list = []

    def build(self, input_shape: tf.TensorShape) -> None:
        width = net_width = int(input_shape[-1])
        for i, block in enumerate(self.settings.mask_blocks):
            self.blocks.append(MaskBlock(block, width if self.settings.use_parallel else net_width, width, self._l2,
                                         seed=self._seed + 10 * i, name=f"block_{i}"))
            net_width = self.blocks[-1].output_width
        super().build(input_shape)

    def call(self, x: tf.Tensor, training: Any = False) -> tf.Tensor:  # pylint: disable=arguments-differ
        if self.input_norm is not None:
            x = self.input_norm(x)
        if self.settings.use_parallel:
            net = tf.concat([block(x, x) for block in self.blocks], axis=1)
        else:
            net = x
            for block in self.blocks:
                net = block(net, x)
        return self.mlp(net, training=training) if self.mlp is not None else net
