"""How much could a rating history add to a model's score? Statistics of the history, stacked onto the scores.

Issue 36's target (tools/bench/sequence_quality.py: the sequence model's second-half AUC >= the model
without a sequence + 0.005) is missed. This bench asks whether the stream holds that much more at all.
For each MovieLens 100K rating, in time order, it computes statistics of the events strictly before that
rating's second (the same rule as the sequences: nothing of the same second, nor the rating itself):

- the user's: how many ratings (``user_ratings``), their mean (``user_mean``), the mean and the liked
  share of the last 1, 3, 5 and 10 (``user_last3``, ``user_last3_liked``, ...), seconds since the last
  (``user_gap``), ratings within the hour (``user_last_hour``);
- the movie's: how many ratings, their mean, the mean of the last 10, the liked share;
- item-based collaborative filtering over the user's last 200 ratings: the movie's cosine similarity to
  each (co-rating counts) weighing the user's centred ratings (``item_knn``), the similarities' sum
  (``item_knn_weight``), and the same over likes only (``co_liked``).

Each statistic is stacked onto a model's prequential scores (sequence_quality.py ``--scores_out``) by a
logistic regression of the score's logit, the statistic standardized, its square and its product with
the logit. The regression is fitted on one half of the judged second half and scored on the other, then
the other way round; the figure is the second half's AUC with the statistic less that without it. Fitting
on the judged half's labels favours the statistics (an online model has no such hindsight), so a gain
here is an optimistic estimate of what that information can add. ``all`` stacks every statistic at once,
and with both models' scores, ``both models + all`` stacks the other model's logit too (an ensemble).

    .venv/bin/python tools/bench/sequence_quality.py --data /tmp/ml-100k --scores_out /tmp/scores.npz
    .venv/bin/python tools/bench/history_signals.py --data /tmp/ml-100k --scores /tmp/scores.npz
"""
import argparse
import json
import math
import os
import sys
from collections import defaultdict
from typing import Dict, List, Optional, Sequence

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from easyonline.scoring.auc_curves import exact_auc as auc  # noqa: E402
from easyonline.movielens.ratings import read_movielens  # noqa: E402
from easyonline.movielens.sequences import Event  # noqa: E402

LAST = (1, 3, 5, 10)  # the user's last ratings the user_last* statistics average
NEIGHBOURS = 200  # the user's last ratings item_knn compares the movie with
LIKED = 4  # a rating >= this is a like (the stream's label)


def _shrunk(total: float, count: int, prior: float, weight: float) -> float:
    """A mean pulled toward ``prior`` as if ``weight`` more values of it were counted (few values vary most)."""
    return (total + prior * weight) / (count + weight)


def history_statistics(ratings: Sequence[Event]) -> Dict[str, np.ndarray]:
    """Per (time, user, movie, rating) of ``ratings`` (in time order), the statistics named in the module's
    docstring, each of events strictly before its time."""
    n = len(ratings)
    names = (["user_ratings", "user_mean", "user_gap", "user_last_hour", "movie_ratings", "movie_mean",
              "movie_last10", "movie_liked", "item_knn", "item_knn_weight", "co_liked"]
             + [f"user_last{k}" for k in LAST] + [f"user_last{k}_liked" for k in LAST])
    out = {name: np.zeros(n) for name in names}
    by_user: Dict[str, list] = defaultdict(list)  # (time, movie, rating), oldest first
    by_movie: Dict[str, list] = defaultdict(list)  # ratings, oldest first
    user_sum: Dict[str, float] = defaultdict(float)
    co_rated: Dict[str, Dict[str, int]] = defaultdict(lambda: defaultdict(int))
    co_liked: Dict[str, Dict[str, int]] = defaultdict(lambda: defaultdict(int))
    liked: Dict[str, int] = defaultdict(int)
    total, count = 0.0, 0
    start = 0
    while start < n:
        end = start
        while end < n and ratings[end][0] == ratings[start][0]:
            end += 1
        prior = total / count if count else 3.5
        for k in range(start, end):  # a second's ratings see only earlier seconds
            stamp, user, movie = ratings[k][0], ratings[k][1], ratings[k][2]
            mine, theirs = by_user[user], by_movie[movie]
            user_mean = _shrunk(user_sum[user], len(mine), prior, 3)
            out["user_ratings"][k] = math.log1p(len(mine))
            out["user_mean"][k] = user_mean
            out["user_gap"][k] = math.log1p(stamp - mine[-1][0]) if mine else 20.0
            out["user_last_hour"][k] = math.log1p(sum(1 for e in mine[-NEIGHBOURS:] if stamp - e[0] < 3600))
            for last in LAST:
                recent = [e[2] for e in mine[-last:]]
                out[f"user_last{last}"][k] = _shrunk(sum(recent), len(recent), prior, 1)
                out[f"user_last{last}_liked"][k] = _shrunk(sum(r >= LIKED for r in recent), len(recent), 0.55, 1)
            out["movie_ratings"][k] = math.log1p(len(theirs))
            out["movie_mean"][k] = _shrunk(sum(theirs), len(theirs), prior, 3)
            out["movie_last10"][k] = _shrunk(sum(theirs[-10:]), len(theirs[-10:]), prior, 3)
            out["movie_liked"][k] = _shrunk(sum(r >= LIKED for r in theirs), len(theirs), 0.55, 3)
            similar, weights, liked_weights = co_rated.get(movie, {}), 0.0, 0.0
            centred = 0.0
            for _, other, rating in mine[-NEIGHBOURS:]:
                shared = similar.get(other, 0)
                if shared:
                    similarity = shared / math.sqrt(len(theirs) * len(by_movie[other]))
                    centred += similarity * (rating - user_mean)
                    weights += similarity
                if rating >= LIKED and co_liked[movie].get(other, 0):
                    liked_weights += co_liked[movie][other] / math.sqrt((liked[movie] + 1) * (liked[other] + 1))
            out["item_knn"][k] = centred / (weights + 0.5)
            out["item_knn_weight"][k] = math.log1p(10 * weights)
            out["co_liked"][k] = math.log1p(10 * liked_weights)
        for k in range(start, end):  # then the second becomes history
            stamp, user, movie, rating = ratings[k][:4]
            for _, other, other_rating in by_user[user]:
                co_rated[movie][other] += 1
                co_rated[other][movie] += 1
                if rating >= LIKED and other_rating >= LIKED:
                    co_liked[movie][other] += 1
                    co_liked[other][movie] += 1
            liked[movie] += rating >= LIKED
            by_user[user].append((stamp, movie, rating))
            by_movie[movie].append(rating)
            user_sum[user] += rating
            total += rating
            count += 1
        start = end
    return out


def fit_logistic(features: np.ndarray, labels: np.ndarray, l2: float = 1e-3, iterations: int = 30) -> np.ndarray:
    """Weights of an L2-regularized logistic regression, by Newton's method (a few dozen columns)."""
    weights = np.zeros(features.shape[1])
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-features @ weights))
        gradient = features.T @ (p - labels) + l2 * weights
        hessian = (features * (p * (1 - p))[:, None]).T @ features + l2 * np.eye(features.shape[1])
        weights -= np.linalg.solve(hessian, gradient)
    return weights


def _columns(logit: np.ndarray, statistics: Sequence[np.ndarray]) -> np.ndarray:
    columns = [np.ones_like(logit), logit]
    for statistic in statistics:
        z = (statistic - statistic.mean()) / (statistic.std() + 1e-9)
        columns += [z, z * z, z * logit]
    return np.stack(columns, axis=1)


def logit(scores: np.ndarray) -> np.ndarray:
    p = np.clip(scores, 1e-6, 1 - 1e-6)
    return np.log(p / (1 - p))


def stacked_auc(labels: np.ndarray, base_logit: np.ndarray, statistics: Sequence[np.ndarray], half: int) -> float:
    """The second half's AUC of ``base_logit`` with ``statistics`` stacked (see the module's docstring)."""
    judged = np.arange(half, len(labels))
    first, second = judged[: len(judged) // 2], judged[len(judged) // 2:]
    features = _columns(base_logit, statistics)
    stacked = np.zeros(len(labels))
    for fitted_on, scored in ((first, second), (second, first)):
        stacked[scored] = features[scored] @ fit_logistic(features[fitted_on], labels[fitted_on])
    return auc(labels[half:], stacked[half:])


def signals(labels: np.ndarray, models: Dict[str, np.ndarray], statistics: Dict[str, np.ndarray]) -> Dict:
    """For each model's scores (one seed): its second-half AUC, and what each statistic, all of them, and
    (with two models) the other model's logit with all of them add when stacked."""
    half = len(labels) // 2
    result: Dict = {"alone": {name: auc(labels[half:], values[half:]) for name, values in statistics.items()},
                    "models": {}}
    for name, scores in models.items():
        base = logit(scores)
        stacked = stacked_auc(labels, base, [], half)
        gains = {key: stacked_auc(labels, base, [values], half) - stacked for key, values in statistics.items()}
        gains["all"] = stacked_auc(labels, base, list(statistics.values()), half) - stacked
        others = [logit(s) for other, s in models.items() if other != name]
        if others:
            gains["both models + all"] = stacked_auc(labels, base, others + list(statistics.values()), half) - stacked
        result["models"][name] = {"second_half": auc(labels[half:], scores[half:]), "gain": gains}
    return result


def print_table(result: Dict) -> None:
    models = list(result["models"])
    print(f"{'2nd half AUC':26}{'alone':>8}" + "".join(f"{'+ onto ' + m:>18}" for m in models))
    print(f"  {'(the model)':24}{'':>8}" + "".join(f"{result['models'][m]['second_half']:>18.4f}" for m in models))
    for name in sorted(result["alone"]) + ["all", "both models + all"]:
        if name != "both models + all" or len(models) > 1:
            alone = f"{result['alone'][name]:.4f}" if name in result["alone"] else ""
            print(f"  {name:24}{alone:>8}" + "".join(f"{result['models'][m]['gain'][name]:>+18.4f}" for m in models))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="directory with MovieLens's u.data and u.item")
    parser.add_argument("--scores", required=True, help="sequence_quality.py --scores_out's file")
    parser.add_argument("--seed_index", type=int, default=0, help="which of the file's seeds (0: the first)")
    args = parser.parse_args(argv)
    saved = np.load(args.scores)
    events = [(r[0], r[1], r[2], r[3]) for r in read_movielens(args.data)]
    labels = np.array([float(e[3] >= LIKED) for e in events])
    if not np.array_equal(saved["labels"], labels):
        raise SystemExit(f"{args.scores}: its labels are not those of {args.data}'s stream")
    models = {name: saved[name][args.seed_index] for name in ("sequence", "single") if name in saved}
    result = signals(labels, models, history_statistics(events))
    result["seed"] = int(saved["seeds"][args.seed_index])
    print(json.dumps(result, indent=1))
    print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
