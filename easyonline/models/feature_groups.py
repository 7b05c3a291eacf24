"""Which features feed a model's deep and wide parts, and each feature group's input: EasyRec's feature groups.

``model_config.feature_groups`` choose which id features and raw columns feed
the wide part (first-order weights, the dense features' linear weights) and
which the deep part (embeddings, and the dense features in the DNN); without
groups every feature feeds both. A group's input (``Model.group_input``)
reads its positions and columns from ``group_columns``.
"""
from typing import Collection, Dict, List, Optional, Set, Tuple

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.features.feature_spec import FeatureSpecs
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()


def grouped_features(specs: FeatureSpecs, model_config: pipeline_pb2.ModelConfig) -> Tuple[
        Set[int], Set[int], Optional[List[int]], Optional[List[int]]]:
    """Indices of the id features, and columns of the dense part, that feed the deep and the wide part (None: all
    dense columns)."""
    id_names = [f.name for f in specs.id_features]
    dense_names = [f.name for f in specs.raw_features]
    groups = model_config.feature_groups
    if not groups:  # (every feature but sequences: those are read by a group's sequence_features only)
        everything = {i for i, f in enumerate(specs.id_features) if not f.sequence}
        return everything, everything, None, None
    deep = {n for g in groups if g.wide_deep != pipeline_pb2.FeatureGroup.WIDE for n in g.feature_names}
    wide = {n for g in groups if g.wide_deep != pipeline_pb2.FeatureGroup.DEEP for n in g.feature_names}
    # (a backbone's groups may list sequences: read by its layers, never embedded as one vector)
    plain = [(i, n) for i, n in enumerate(id_names) if not specs.id_features[i].sequence]
    return ({i for i, n in plain if n in deep}, {i for i, n in plain if n in wide},
            specs.dense_columns([n for n in dense_names if n in deep]),
            specs.dense_columns([n for n in dense_names if n in wide]))


def group_columns(specs: FeatureSpecs, model_config: pipeline_pb2.ModelConfig,
                  deep_ids: Collection[int]) -> Dict[str, tuple]:
    """{group name: (positions in ``embed``'s embeddings list, raw feature columns (None: all))}, in each group's
    feature order; ``all`` is every deep feature unless a group has that name. A WIDE group's ids are not
    embedded for the deep part: the validator keeps towers off such groups (``check_group``)."""
    ordered = sorted(deep_ids)
    position = {specs.id_features[i].name: k for k, i in enumerate(ordered)}
    groups: Dict[str, tuple] = {"all": (list(range(len(ordered))), None)}
    deep_dense = grouped_features(specs, model_config)[2]
    if deep_dense is not None:
        groups["all"] = (list(range(len(ordered))), deep_dense)
    for group in model_config.feature_groups:
        if group.group_name:
            groups[group.group_name] = ([position[n] for n in group.feature_names if n in position],
                                        specs.dense_columns(list(group.feature_names)))
    return groups


def columns_of(dense: Optional[tf.Tensor], columns: Optional[List[int]]) -> Optional[tf.Tensor]:
    """``dense`` restricted to ``columns`` (None: all; none left: None)."""
    if dense is None or columns is None:
        return dense
    if not columns:
        return None
    return tf.gather(dense, columns, axis=1)
