"""EasyRec's gauc and session_auc: the AUC of each user's (or session's) samples, averaged.

A global AUC mixes users: a model that only learns which users click more
scores well on it. The AUC within each user's samples measures how well
the model ranks what one user sees, which is what a feed or ad slot uses.
Groups whose samples are all positive or all negative have no AUC and are
left out; ``reduction`` weighs the rest equally (``mean``), by their
samples (``mean_by_sample_num``) or by their positives
(``mean_by_positive_num``), as EasyRec does.
"""
import dataclasses
from typing import List, Optional

import numpy as np

from easyonline.core.errors import ConfigError
from easyonline.features.feature_spec import FeatureSpecs
from easyonline.protos import pipeline_pb2

REDUCTIONS = ("mean", "mean_by_sample_num", "mean_by_positive_num")


def grouped_auc(keys: np.ndarray, labels: np.ndarray, probs: np.ndarray, reduction: str = "mean") -> Optional[float]:
    """The AUC within each group of equal ``keys`` (ties count one half), reduced; None without any group
    that has both labels."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction {reduction!r} is not one of {', '.join(REDUCTIONS)}")
    if len(keys) == 0:
        return None
    _, group = np.unique(np.asarray(keys), return_inverse=True)
    group = group.reshape(-1)
    positive = (np.asarray(labels).reshape(-1) >= 0.5).astype(np.float64)
    probs = np.asarray(probs, np.float64).reshape(-1)
    order = np.lexsort((probs, group))
    g, p, y = group[order], probs[order], positive[order]
    n = len(g)
    new_group = np.r_[True, g[1:] != g[:-1]]
    group_start = np.maximum.accumulate(np.where(new_group, np.arange(n), 0))
    new_tie = new_group | np.r_[True, p[1:] != p[:-1]]
    tie_start = np.flatnonzero(new_tie)
    tie_end = np.r_[tie_start[1:], n]
    # 1-based rank within the group, ties sharing their average rank
    rank = ((tie_start + tie_end - 1) / 2.0)[np.cumsum(new_tie) - 1] - group_start + 1
    groups = int(g.max()) + 1
    count = np.bincount(g, minlength=groups).astype(np.float64)
    pos = np.bincount(g, weights=y, minlength=groups)
    neg = count - pos
    rank_sum = np.bincount(g, weights=rank * y, minlength=groups)
    valid = (pos > 0) & (neg > 0)
    if not valid.any():
        return None
    auc = (rank_sum[valid] - pos[valid] * (pos[valid] + 1) / 2) / (pos[valid] * neg[valid])
    weights = {"mean": None, "mean_by_sample_num": count[valid], "mean_by_positive_num": pos[valid]}[reduction]
    return float(np.average(auc, weights=weights))


@dataclasses.dataclass(frozen=True)
class GroupedAucMetric:
    """One configured gauc / session_auc: its name, the feature whose ids group the samples, the reduction."""
    name: str
    feature: str
    reduction: str


def grouped_auc_metrics(config: pipeline_pb2.PipelineConfig, specs: FeatureSpecs) -> List[GroupedAucMetric]:
    """eval_config's gauc and session_auc; ConfigError when the field is not the input of a one-id feature."""
    metrics = []
    for i, metric in enumerate(config.eval_config.metrics_set):
        which = metric.WhichOneof("metric")
        if which not in ("gauc", "session_auc"):
            continue
        settings = getattr(metric, which)
        key_field = "uid_field" if which == "gauc" else "session_id_field"
        field = getattr(settings, key_field)
        path = f"eval_config.metrics_set[{i}].{which}"
        if settings.reduction not in REDUCTIONS:
            raise ConfigError(f"{path}.reduction", f"{settings.reduction!r} is not one of {', '.join(REDUCTIONS)}")
        features = [f for f in specs.id_features
                    if f.input_name == field and not f.combo and not f.multi_value and not f.boundaries]
        if not features:
            raise ConfigError(f"{path}.{key_field}", f"{field!r} must be the input of an IdFeature with one id per "
                              "sample (its ids group the samples)")
        metrics.append(GroupedAucMetric(which, features[0].name, settings.reduction))
    return metrics
