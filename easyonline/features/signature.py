"""The TensorSpecs of parsed features: what the train step, scoring and exports are traced with."""
from typing import Dict, Union

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.features.feature_spec import FeatureSpecs, positions_key, weights_key

tf = ensure_legacy_keras()


def feature_signature(specs: FeatureSpecs) -> Dict[str, Union[tf.TensorSpec, tf.RaggedTensorSpec]]:
    """int64 ids per id feature ([B], or ragged [B, None] for tag and sequence features), a weighted tag
    feature's float32 weights (ragged, under ``weights_key``), a sequence's positions when it has several
    values a position (int64, ragged, under ``positions_key``) and float32 [B] per raw feature ([B, dim] for a
    vector)."""
    signature = {}
    for feature in specs.id_features:
        if feature.multi_value:
            signature[feature.name] = tf.RaggedTensorSpec([None, None], tf.int64, ragged_rank=1,
                                                          row_splits_dtype=tf.int64)
            if feature.carries_weights:
                signature[weights_key(feature.name)] = tf.RaggedTensorSpec([None, None], tf.float32, ragged_rank=1,
                                                                           row_splits_dtype=tf.int64)
            if feature.positioned:
                signature[positions_key(feature.name)] = tf.RaggedTensorSpec([None, None], tf.int64, ragged_rank=1,
                                                                             row_splits_dtype=tf.int64)
        else:
            signature[feature.name] = tf.TensorSpec([None], tf.int64)
    for feature in specs.raw_features:
        signature[feature.name] = tf.TensorSpec([None, feature.dim] if feature.is_vector else [None], tf.float32)
    return signature


def empty_features(specs: FeatureSpecs):
    """A batch of zero samples in ``feature_signature(specs)``: calling a model on it creates its variables."""
    features = {}
    for feature in specs.id_features:
        empty = tf.zeros([0], tf.int64)
        features[feature.name] = (tf.RaggedTensor.from_row_splits(empty, tf.zeros([1], tf.int64))
                                  if feature.multi_value else empty)
        if feature.carries_weights:
            features[weights_key(feature.name)] = tf.RaggedTensor.from_row_splits(tf.zeros([0]), tf.zeros([1], tf.int64))
        if feature.positioned:
            features[positions_key(feature.name)] = tf.RaggedTensor.from_row_splits(empty, tf.zeros([1], tf.int64))
    for feature in specs.raw_features:
        features[feature.name] = tf.zeros([0, feature.dim] if feature.is_vector else [0], tf.float32)
    return features
