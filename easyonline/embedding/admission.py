"""Admission policies: which ids earn a trainable row (Paddle's entry policies).

Each policy maps the statistics of the ids in a batch (after counting the
batch) to a boolean "admit now". Ids already in the table stay admitted.
"""
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()


def show_click_score(show, click, nonclk_coeff: float, click_coeff: float):
    """Paddle's score: (show - click) * nonclk_coeff + click * click_coeff."""
    return (show - click) * nonclk_coeff + click * click_coeff


def _uniform_from(ids, occurrence):
    """A deterministic uniform in [0, 1) per (id, occurrence number): reproducible runs."""
    text = tf.strings.join([tf.strings.as_string(ids), tf.strings.as_string(tf.cast(occurrence, tf.int64))], "/")
    return tf.cast(tf.strings.to_hash_bucket_fast(text, 2**31 - 1), tf.float64) / float(2**31 - 1)


def admits(policy: pipeline_pb2.AdmissionConfig, ids, show, click, batch_count):
    """Boolean [n]: whether each id is admitted after this batch.

    ``show``/``click`` include this batch; ``batch_count`` is the id's
    occurrences in it. For the probability filter, the batch's k occurrences
    admit with probability 1 - (1 - p)^k, drawn once per (id, show before the batch).
    """
    which = policy.WhichOneof("policy")
    if which == "count_filter":
        return show >= float(policy.count_filter.min_count)
    if which == "probability_filter":
        p = float(policy.probability_filter.probability)
        chance = 1.0 - tf.pow(tf.constant(1.0 - p, tf.float64), tf.cast(batch_count, tf.float64))
        return _uniform_from(ids, show - batch_count) < chance
    score = policy.show_click_score
    return show_click_score(show, click, score.nonclk_coeff, score.click_coeff) >= score.base_threshold
