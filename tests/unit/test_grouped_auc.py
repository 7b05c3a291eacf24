"""gauc / session_auc: the AUC within each group, equal to counting pairs, with EasyRec's three reductions."""
import numpy as np
import pytest

from easyonline.config import ConfigError, parse_pipeline_config
from easyonline.features.feature_spec import build_feature_specs
from easyonline.scoring.grouped_auc import grouped_auc, grouped_auc_metrics


def _pairs_auc(labels, probs) -> float:
    pos, neg = probs[labels == 1], probs[labels == 0]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return wins / (len(pos) * len(neg))


def test_each_groups_auc_equals_counting_its_pairs_and_the_reductions_weigh_them():
    rng = np.random.default_rng(7)
    keys = rng.integers(0, 40, 3000)
    labels = (rng.random(3000) < 0.3).astype(np.float32)
    probs = np.round(rng.random(3000) * 0.5 + 0.3 * labels, 2)  # rounded: many ties
    aucs, sizes, positives = [], [], []
    for key in np.unique(keys):
        y, p = labels[keys == key], probs[keys == key]
        if 0 < y.sum() < len(y):
            aucs.append(_pairs_auc(y, p))
            sizes.append(len(y))
            positives.append(y.sum())
    assert grouped_auc(keys, labels, probs) == pytest.approx(np.mean(aucs), abs=1e-12)
    assert grouped_auc(keys, labels, probs, "mean_by_sample_num") == pytest.approx(np.average(aucs, weights=sizes))
    assert grouped_auc(keys, labels, probs, "mean_by_positive_num") == pytest.approx(
        np.average(aucs, weights=positives))
    assert grouped_auc(keys.astype(str).astype(object), labels, probs) == pytest.approx(np.mean(aucs))


def test_groups_with_one_label_are_left_out_and_none_without_any_group_with_both():
    keys = np.array([1, 1, 1, 2, 2, 3])
    labels = np.array([1, 0, 0, 1, 1, 0])
    probs = np.array([0.9, 0.1, 0.95, 0.5, 0.6, 0.2])
    assert grouped_auc(keys, labels, probs) == pytest.approx(0.5)  # only user 1: one pair won, one lost
    assert grouped_auc(np.array([1, 2]), np.array([1, 0]), np.array([0.3, 0.4])) is None
    assert grouped_auc(np.array([]), np.array([]), np.array([])) is None
    with pytest.raises(ValueError, match="reduction"):
        grouped_auc(keys, labels, probs, "median")


CONFIG = """model_dir: "/tmp/m"
kafka_train_input { server: "127.0.0.1:9092" topic: "t" }
data_config { input_fields { input_name: "label" input_type: INT32 } input_fields { input_name: "u" }
              input_fields { input_name: "tags" } input_fields { input_name: "x" input_type: FLOAT }
              label_fields: "label" }
feature_configs { input_names: "u" feature_name: "user" embedding_dim: 4 }
feature_configs { input_names: "tags" feature_type: TagFeature separator: "|" embedding_dim: 4 }
feature_configs { input_names: "x" feature_type: RawFeature }
model_config { model_class: "dnn" }
"""


def test_the_grouping_field_must_be_a_one_id_feature():
    config = parse_pipeline_config(CONFIG + 'eval_config { metrics_set { gauc { uid_field: "u" '
                                   'reduction: "mean_by_sample_num" } } metrics_set { auc {} } }')
    (metric,) = grouped_auc_metrics(config, build_feature_specs(config))
    assert (metric.name, metric.feature, metric.reduction) == ("gauc", "user", "mean_by_sample_num")
    for field, metric_text in (("tags", 'gauc { uid_field: "tags" }'), ("x", 'session_auc { session_id_field: "x" }')):
        config = parse_pipeline_config(CONFIG + f"eval_config {{ metrics_set {{ {metric_text} }} }}")
        with pytest.raises(ConfigError) as e:
            grouped_auc_metrics(config, build_feature_specs(config))
        assert e.value.path.startswith("eval_config.metrics_set[0].") and repr(field) in str(e.value)
    config = parse_pipeline_config(CONFIG + 'eval_config { metrics_set { gauc { uid_field: "u" reduction: "sum" } } }')
    with pytest.raises(ConfigError) as e:
        grouped_auc_metrics(config, build_feature_specs(config))
    assert e.value.path == "eval_config.metrics_set[0].gauc.reduction"
