"""The losses a task can be given (tasks/losses/), each against EasyRec's formula computed by hand in numpy,
and how a config's ``losses`` become a task (tasks/from_config.py ``make_task``)."""
import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()

import numpy as np
import pytest
from google.protobuf import text_format

from easyonline.core.errors import ConfigError
from easyonline.features.label_kinds import BINARY, REGRESSION, label_kinds
from easyonline.models.layers import Dice
from easyonline.protos import pipeline_pb2
from easyonline.tasks.from_config import make_task, single_task
from easyonline.tasks.losses.cross_entropy import classification_loss
from easyonline.tasks.losses.f1_reweighted import f1_reweighted_loss
from easyonline.tasks.losses.focal import binary_focal_loss
from easyonline.tasks.losses.jrc import jrc_loss
from easyonline.tasks.losses.pairwise import pairwise_focal_loss, pairwise_logistic_loss, pairwise_loss
from easyonline.tasks.losses.squared_error import l2_loss

LABELS = np.array([1.0, 0.0, 1.0, 0.0, 0.0])
LOGITS = np.array([0.5, -0.2, 0.1, 0.3, -1.0])
WEIGHTS = np.array([1.0, 2.0, 0.0, 0.5, 1.5])
SESSIONS = np.array([7, 7, 9, 9, 9])


def _t(values, dtype=tf.float32):
    return tf.constant(np.asarray(values), dtype)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _xent(y, z):
    p = _sigmoid(z)
    return -(y * np.log(p) + (1 - y) * np.log(1 - p))


def _by_nonzero(losses, weights):
    """tf.losses' SUM_BY_NONZERO_WEIGHTS."""
    return np.sum(losses * weights) / max(np.count_nonzero(weights), 1)


def _pairs(labels, sessions=None):
    """The (i, j) with label_i > label_j (same session when given), row-major as boolean_mask takes them."""
    n = len(labels)
    return [(i, j) for i in range(n) for j in range(n)
            if labels[i] > labels[j] and (sessions is None or sessions[i] == sessions[j])]


def test_classification_and_l2_are_the_weighted_means():
    assert float(classification_loss(_t(LABELS), _t(LOGITS))) == pytest.approx(np.mean(_xent(LABELS, LOGITS)), rel=1e-5)
    # weight 0 leaves the sample out of the mean (4 samples count)
    expected = _by_nonzero(_xent(LABELS, LOGITS), WEIGHTS)
    assert float(classification_loss(_t(LABELS), _t(LOGITS), _t(WEIGHTS))) == pytest.approx(expected, rel=1e-5)
    y = np.array([2.0, -1.0, 0.5])
    z = np.array([1.0, 1.0, 0.5])
    assert float(l2_loss(_t(y), _t(z))) == pytest.approx((1 + 4 + 0) / 3, rel=1e-6)


def test_f1_reweighted_loss_weighs_the_negatives_by_easyrecs_formula():
    beta2 = 2.25
    p = _sigmoid(LOGITS)
    n, pos = len(LABELS), LABELS.sum()
    tp, tn = p.sum(), n - p.sum()
    neg_weight = tp / (beta2 * pos + (n - pos) - tn + 1e-8)
    weights = np.where(LABELS == 1, 1.0, neg_weight)
    expected = _by_nonzero(_xent(LABELS, LOGITS), weights)
    got = f1_reweighted_loss(_t(LABELS), _t(LOGITS), f1_beta_square=beta2)
    assert float(got) == pytest.approx(expected, rel=1e-5)
    # with sample weights: times each sample's weight, over the non-zero ones
    expected = _by_nonzero(_xent(LABELS, LOGITS), weights * WEIGHTS)
    got = f1_reweighted_loss(_t(LABELS), _t(LOGITS), _t(WEIGHTS), f1_beta_square=beta2)
    assert float(got) == pytest.approx(expected, rel=1e-5)
    # label smoothing 0.2: the cross-entropy's labels become y * 0.8 + 0.1
    y = LABELS * 0.8 + 0.1
    smoothed = -(y * np.log(p) + (1 - y) * np.log(1 - p))
    got = f1_reweighted_loss(_t(LABELS), _t(LOGITS), f1_beta_square=beta2, label_smoothing=0.2)
    assert float(got) == pytest.approx(_by_nonzero(smoothed, np.where(LABELS == 1, 1.0, neg_weight)), rel=1e-5)


def test_binary_focal_loss_down_weighs_the_easy_examples():
    p = np.clip(_sigmoid(LOGITS), 1e-7, 1 - 1e-7)
    p_t = LABELS * p + (1 - LABELS) * (1 - p)
    focal = (1 - p_t) ** 2.0
    expected = _by_nonzero(_xent(LABELS, LOGITS), focal)
    assert float(binary_focal_loss(_t(LABELS), _t(LOGITS))) == pytest.approx(expected, rel=1e-5)
    # alpha 0.25 and gamma 1, with sample weights
    weights = (1 - p_t) * (LABELS * 0.25 + 0.75 * (1 - LABELS)) * WEIGHTS
    got = binary_focal_loss(_t(LABELS), _t(LOGITS), _t(WEIGHTS), gamma=1.0, alpha=0.25)
    assert float(got) == pytest.approx(_by_nonzero(_xent(LABELS, LOGITS), weights), rel=1e-5)
    # ohem 0.4: of 5 weighted losses, the mean of the round(2) largest
    weighted = _xent(LABELS, LOGITS) * focal
    got = binary_focal_loss(_t(LABELS), _t(LOGITS), ohem_ratio=0.4)
    assert float(got) == pytest.approx(np.mean(np.sort(weighted)[-2:]), rel=1e-5)


def test_pairwise_loss_is_the_logistic_loss_of_each_pairs_difference():
    pairs = _pairs(LABELS)
    assert len(pairs) == 6  # 2 positives x 3 negatives
    d = np.array([LOGITS[i] - LOGITS[j] for i, j in pairs])
    assert float(pairwise_loss(_t(LABELS), _t(LOGITS))) == pytest.approx(np.mean(np.log1p(np.exp(-d))), rel=1e-5)
    # margin 0.3, temperature 2: (s_i - s_j) / 2 - 0.3
    got = pairwise_loss(_t(LABELS), _t(LOGITS), margin=0.3, temperature=2.0)
    assert float(got) == pytest.approx(np.mean(np.log1p(np.exp(-(d / 2 - 0.3)))), rel=1e-5)
    # a pair weighs its positive's sample weight (sample 2 weighs 0: its pairs drop out)
    w = np.array([WEIGHTS[i] for i, _ in pairs])
    got = pairwise_loss(_t(LABELS), _t(LOGITS), _t(WEIGHTS))
    assert float(got) == pytest.approx(_by_nonzero(np.log1p(np.exp(-d)), w), rel=1e-5)


def test_pairwise_loss_pairs_within_sessions_only():
    pairs = _pairs(LABELS, SESSIONS)
    assert pairs == [(0, 1), (2, 3), (2, 4)]
    d = np.array([LOGITS[i] - LOGITS[j] for i, j in pairs])
    got = pairwise_loss(_t(LABELS), _t(LOGITS), sessions=_t(SESSIONS, tf.int64))
    assert float(got) == pytest.approx(np.mean(np.log1p(np.exp(-d))), rel=1e-5)


def test_a_batch_without_a_pair_adds_nothing():
    labels = _t([0.0, 0.0, 0.0])
    for loss in (pairwise_loss, pairwise_logistic_loss, pairwise_focal_loss):
        assert float(loss(labels, _t([0.1, 0.5, -0.3]))) == 0.0


def test_pairwise_logistic_loss_margins():
    labels = np.array([2.0, 1.0, 0.0, 1.0])
    logits = np.array([0.4, 0.9, -0.5, 0.0])
    pairs = _pairs(labels)
    d = np.array([logits[i] - logits[j] for i, j in pairs])
    assert float(pairwise_logistic_loss(_t(labels), _t(logits))) == pytest.approx(np.mean(np.log1p(np.exp(-d))),
                                                                                   rel=1e-5)
    got = pairwise_logistic_loss(_t(labels), _t(logits), hinge_margin=0.5)
    assert float(got) == pytest.approx(np.mean(np.log1p(np.exp(-(d - 0.5)))), rel=1e-5)
    # use_label_margin with temperature 2: (s_i - s_j) / 2 - (y_i - y_j) / 2
    margin = np.array([labels[i] - labels[j] for i, j in pairs])
    got = pairwise_logistic_loss(_t(labels), _t(logits), temperature=2.0, use_label_margin=True)
    assert float(got) == pytest.approx(np.mean(np.log1p(np.exp(-(d / 2 - margin / 2)))), rel=1e-5)
    # ohem 0.5: the mean of the round(half) hardest pairs
    losses = np.sort(np.log1p(np.exp(-d)))
    got = pairwise_logistic_loss(_t(labels), _t(logits), ohem_ratio=0.5)
    assert float(got) == pytest.approx(np.mean(losses[-round(len(losses) * 0.5):]), rel=1e-5)


def test_pairwise_focal_loss_leaves_out_pairs_apart_by_the_hinge_margin():
    pairs = _pairs(LABELS)
    d = np.array([LOGITS[i] - LOGITS[j] for i, j in pairs])
    kept = d[d < 0.5]
    assert 0 < len(kept) < len(d)
    p = np.clip(_sigmoid(kept), 1e-7, 1 - 1e-7)
    expected = _by_nonzero(-np.log(_sigmoid(kept)), (1 - p) ** 2)
    assert float(pairwise_focal_loss(_t(LABELS), _t(LOGITS), hinge_margin=0.5)) == pytest.approx(expected, rel=1e-5)


def _log_softmax(x):
    m = x.max()
    return x - m - np.log(np.sum(np.exp(x - m)))


def _jrc(labels, logits, sessions, alpha, weights=None, same_label_loss=True):
    """EasyRec's jrc_loss, written per sample j's session."""
    w = np.ones(len(labels)) if weights is None else weights
    softmax = np.exp(logits - logits.max(1, keepdims=True))
    softmax /= softmax.sum(1, keepdims=True)
    ce = _by_nonzero(-np.log(softmax[np.arange(len(labels)), labels.astype(int)]), w) if weights is not None \
        else np.mean(-np.log(softmax[np.arange(len(labels)), labels.astype(int)]))
    ge = []
    for j in range(len(labels)):
        members = np.flatnonzero(sessions == sessions[j])
        total = 0.0
        for c, y in ((1, labels), (0, 1 - labels)):
            if same_label_loss:
                log_p = _log_softmax(logits[members, c])
                total -= w[j] * np.sum(y[members] * log_p)
            elif y[j] > 0:  # j against the other-label samples of its session
                others = [i for i in members if i == j or y[i] == 0]
                log_p = _log_softmax(logits[others, c])
                total -= w[j] * log_p[others.index(j)]
        ge.append(total / len(members) if same_label_loss else total)
    return alpha * ce + (1 - alpha) * np.mean(ge)


def test_jrc_loss_is_calibration_plus_the_in_session_ranking():
    logits = np.stack([-LOGITS * 0.7, LOGITS], axis=1)
    args = (_t(LABELS), _t(logits))
    sessions = _t(SESSIONS, tf.int64)
    got = jrc_loss(*args, sessions=sessions, alpha=0.3)
    assert float(got) == pytest.approx(_jrc(LABELS, logits, SESSIONS, 0.3), rel=1e-5)
    got = jrc_loss(*args, _t(WEIGHTS), sessions=sessions, alpha=0.5)
    assert float(got) == pytest.approx(_jrc(LABELS, logits, SESSIONS, 0.5, WEIGHTS), rel=1e-5)
    got = jrc_loss(*args, sessions=sessions, alpha=0.5, same_label_loss=False)
    assert float(got) == pytest.approx(_jrc(LABELS, logits, SESSIONS, 0.5, same_label_loss=False), rel=1e-5)


def _losses(text: str):
    tower = text_format.Parse(text, pipeline_pb2.TaskTower())
    return list(tower.losses)


def test_a_task_of_losses_sums_their_weighted_values():
    losses = _losses("""
      losses { loss_type: F1_REWEIGHTED_LOSS weight: 0.5 f1_reweighted_loss { f1_beta_square: 2.25 } }
      losses { loss_type: PAIR_WISE_LOSS weight: 2.0 pairwise_loss { margin: 0.1 } }""")
    task = make_task(pipeline_pb2.CLASSIFICATION, 1, "t", 100, "click", "ctr", losses=losses)
    assert task.kind == BINARY and [t.name for t in task.terms] == ["f1_reweighted_loss", "pair_wise_loss"]
    expected = 0.5 * float(f1_reweighted_loss(_t(LABELS), _t(LOGITS), f1_beta_square=2.25)) \
        + 2.0 * float(pairwise_loss(_t(LABELS), _t(LOGITS), margin=0.1))
    assert float(task.loss(_t(LABELS), _t(LOGITS))) == pytest.approx(expected, rel=1e-5)
    # the sample weights reach the terms (unless the tower says not to use them)
    weighted = 0.5 * float(f1_reweighted_loss(_t(LABELS), _t(LOGITS), _t(WEIGHTS), f1_beta_square=2.25)) \
        + 2.0 * float(pairwise_loss(_t(LABELS), _t(LOGITS), _t(WEIGHTS), margin=0.1))
    assert float(task.loss(_t(LABELS), _t(LOGITS), _t(WEIGHTS))) == pytest.approx(weighted, rel=1e-5)
    assert weighted != pytest.approx(expected, rel=1e-3)
    unweighted = make_task(0, 1, "t", 100, "click", "ctr", use_sample_weight=False, losses=losses)
    assert float(unweighted.loss(_t(LABELS), _t(LOGITS), _t(WEIGHTS))) == pytest.approx(expected, rel=1e-5)


def test_a_session_loss_reads_its_ids_from_the_features():
    losses = _losses('losses { loss_type: PAIRWISE_LOGISTIC_LOSS pairwise_logistic_loss { session_name: "uid" } }')
    task = make_task(0, 1, "t", 100, "click", "ctr", losses=losses)
    features = {"uid": _t(SESSIONS, tf.int64)}
    expected = pairwise_logistic_loss(_t(LABELS), _t(LOGITS), sessions=features["uid"])
    assert float(task.loss(_t(LABELS), _t(LOGITS), None, features)) == pytest.approx(float(expected), rel=1e-6)
    with pytest.raises(ValueError, match="uid"):
        task.loss(_t(LABELS), _t(LOGITS))


def test_a_jrc_task_has_two_logits_and_a_softmax_probability():
    losses = _losses('losses { loss_type: JRC_LOSS jrc_loss { session_name: "uid" alpha: 0.5 } }')
    task = make_task(0, 2, "t", 100, "buy", "cvr", losses=losses)
    assert task.num_class == 2 and task.kind == BINARY
    logits = _t([[0.0, np.log(3.0)], [1.0, 1.0]])
    np.testing.assert_allclose(task.predictions(logits), [0.75, 0.5], rtol=1e-6)
    outputs = task.outputs(logits, "_cvr")
    assert sorted(outputs) == ["logits_cvr", "pos_logits_cvr", "probs_cvr"]
    np.testing.assert_allclose(outputs["pos_logits_cvr"].numpy(), [np.log(3.0), 1.0], rtol=1e-6)
    with pytest.raises(ConfigError, match=r"t\.num_class: must be 2"):
        make_task(0, 1, "t", 100, "buy", "cvr", losses=losses)


@pytest.mark.parametrize("text, field, why", [
    ('losses { loss_type: L2_LOSS } losses { loss_type: PAIR_WISE_LOSS }', "t.losses", "mixes kinds"),
    ('losses { loss_type: CLASSIFICATION } losses { loss_type: JRC_LOSS jrc_loss { session_name: "u" } }',
     "t.losses", "JRC_LOSS takes two logits"),
    ('losses { loss_type: PAIR_WISE_LOSS f1_reweighted_loss {} }', "t.losses[0].f1_reweighted_loss",
     "parameters of another loss"),
    ('losses { loss_type: CLASSIFICATION learn_loss_weight: true }', "t.losses[0].learn_loss_weight",
     "uncertainty weighting"),
    ('losses { loss_type: CIRCLE_LOSS }', "t.losses[0].loss_type", "CIRCLE_LOSS is not supported"),
    ('losses { loss_type: BINARY_FOCAL_LOSS binary_focal_loss { ohem_ratio: 0 } }',
     "t.losses[0].binary_focal_loss.ohem_ratio", "must be in"),
    ('losses { loss_type: JRC_LOSS }', "t.losses[0].jrc_loss.session_name", "needs the feature"),
    ('losses { loss_type: JRC_LOSS jrc_loss { session_name: "u" loss_weight_strategy: "uncertainty" } }',
     "t.losses[0].jrc_loss.loss_weight_strategy", "only 'fixed'"),
    ('losses { loss_type: CLASSIFICATION weight: -1 }', "t.losses[0].weight", ">= 0"),
])
def test_bad_losses_are_config_errors_naming_the_field(text, field, why):
    with pytest.raises(ConfigError, match=why) as error:
        make_task(0, 2 if "JRC_LOSS" in text and "CLASSIFICATION" not in text else 1, "t", 100, "y", "n",
                  losses=_losses(text))
    assert error.value.path == field


def test_the_task_kind_and_the_label_kind_follow_the_losses():
    config = text_format.Parse("""
      data_config { label_fields: "clk" label_fields: "time" }
      model_config { model_class: "dnn" dnn {} losses { loss_type: L2_LOSS } losses { loss_type: L2_LOSS weight: 2 } }
    """, pipeline_pb2.PipelineConfig())
    assert label_kinds(config) == {"clk": REGRESSION}
    task = single_task(config.model_config, ["clk", "time"], 100)
    assert task.kind == REGRESSION and task.name == "regression" and len(task.terms) == 2
    config.model_config.ClearField("losses")
    config.model_config.losses.add(loss_type=pipeline_pb2.PAIR_WISE_LOSS)
    config.model_config.loss_type = pipeline_pb2.L2_LOSS  # replaced by the losses
    assert label_kinds(config) == {"clk": BINARY}
    assert single_task(config.model_config, ["clk"], 100).kind == BINARY
    config.model_config.losses.add(loss_type=pipeline_pb2.JRC_LOSS).jrc_loss.session_name = "u"
    with pytest.raises(ConfigError, match="task tower") as error:
        single_task(config.model_config, ["clk"], 100)
    assert error.value.path == "model_config.losses[1].loss_type"


def test_dice_is_an_adaptive_prelu_over_the_batch_statistics():
    x = np.array([[1.0, -2.0], [3.0, 0.5], [-1.0, 1.0]], np.float32)
    dice = Dice()
    dice(tf.constant(x[:0]), training=False)  # builds its weights
    dice.alpha.assign([0.25, -0.5])
    normed = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-9)
    p = _sigmoid(normed)
    expected = np.array([0.25, -0.5]) * (1 - p) * x + p * x
    np.testing.assert_allclose(dice(tf.constant(x), training=True).numpy(), expected, rtol=1e-4, atol=1e-5)
    # serving: the moving statistics (after one step: 0.99 * (0, 1) + 0.01 * the batch's)
    mean = 0.01 * x.mean(0)
    var = 0.99 + 0.01 * x.var(0)  # (Keras's unfused batch norm: the biased variance)
    p = _sigmoid((x - mean) / np.sqrt(var + 1e-9))
    expected = np.array([0.25, -0.5]) * (1 - p) * x + p * x
    np.testing.assert_allclose(dice(tf.constant(x), training=False).numpy(), expected, rtol=1e-4, atol=1e-5)
