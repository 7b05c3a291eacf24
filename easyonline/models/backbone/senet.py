"""EasyRec's SENet layer of a backbone (FiBiNET's squeeze and excitation, Huang et al. 2019; FiBiNet++'s
grouped squeeze): a weight per column of the features, from the features themselves."""
from typing import Any, Sequence

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()


class SENet(tf.keras.layers.Layer):
    """``call(features)``: a list of [B, dim] features (each dim a multiple of ``num_squeeze_group``) ->
    [B, sum of dims].

    Each feature's columns are split into ``num_squeeze_group`` groups, each squeezed to its max and its mean;
    a relu layer of max(1, fields * groups * 2 // reduction_ratio) units and a linear one of every column give
    the weights; the concatenated features times their weights (plus the features: ``use_skip_connection``),
    layer-normalized (``use_output_layer_norm``)."""

    def __init__(self, settings: pipeline_pb2.SENet, fields: int, width: int, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.settings = settings
        groups = settings.num_squeeze_group
        self.reduce = tf.keras.layers.Dense(max(1, fields * groups * 2 // settings.reduction_ratio),
                                            activation="relu", name="W1",
                                            kernel_initializer=tf.keras.initializers.HeNormal(seed=seed))
        self.excite = tf.keras.layers.Dense(width, name="W2",
                                            kernel_initializer=tf.keras.initializers.GlorotNormal(seed=seed + 1))
        self.norm = tf.keras.layers.LayerNormalization(name="output_ln") if settings.use_output_layer_norm else None

    def call(self, features: Sequence[tf.Tensor]) -> tf.Tensor:  # pylint: disable=arguments-differ
        groups = self.settings.num_squeeze_group
        squeezed = []
        for feature in features:
            split = tf.reshape(feature, [-1, groups, int(feature.shape[-1]) // groups])
            squeezed += [tf.reduce_max(split, axis=-1), tf.reduce_mean(split, axis=-1)]
        weights = self.excite(self.reduce(tf.concat(squeezed, axis=1)))
        inputs = tf.concat(features, axis=-1)
        output = inputs * weights
        if self.settings.use_skip_connection:
            output += inputs
        return self.norm(output) if self.norm is not None else output
