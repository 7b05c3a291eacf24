"""Checks of a model's settings that several models share (their ``validate_settings`` call them)."""
from typing import Any, Sequence

from easyonline.core.errors import ConfigError
from easyonline.features.feature_spec import is_id_feature
from easyonline.protos import pipeline_pb2


def check_group(config: pipeline_pb2.PipelineConfig, group: str, path: str) -> None:
    """ConfigError at ``path`` unless ``group`` names a feature group that feeds the deep part (or is ``all``
    without such a group: every deep feature)."""
    groups = {g.group_name: g for g in config.model_config.feature_groups}
    if group not in groups:
        if group == "all":
            return
        raise ConfigError(path, f"{group!r} is not a model_config.feature_groups group_name "
                          f"(groups: {sorted(n for n in groups if n)}; 'all' is every feature when no group has that name)")
    if groups[group].wide_deep == pipeline_pb2.FeatureGroup.WIDE:
        raise ConfigError(path, f"feature group {group!r} is WIDE (first-order weights only): a tower needs DEEP "
                          "or WIDE_AND_DEEP features")


def check_deepfm_terms(config: pipeline_pb2.PipelineConfig, path: str, towers: Sequence[Any] = ()) -> None:
    """ConfigError at ``path`` (a ``deepfm_terms`` that is set) unless the id features have one embedding_dim
    (the FM term takes dot products of every pair of them), as DeepFM's, and every tower has one logit (a
    JRC_LOSS tower's two logits would both get the same term, which its softmax cancels)."""
    two_logits = [t.tower_name for t in towers if t.num_class != 1]
    if two_logits:
        raise ConfigError(path, f"towers {two_logits} have num_class 2 (JRC_LOSS): the DeepFM terms add to a "
                          "single logit; turn deepfm_terms off or give those towers num_class 1")
    dims = sorted({f.embedding_dim for f in config.feature_configs if is_id_feature(f)})
    if len(dims) > 1:
        raise ConfigError(path, f"the FM term takes dot products of every pair of id features' embeddings: they "
                          f"need one embedding_dim, got {dims}")
