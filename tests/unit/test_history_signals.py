"""The history-signals bench (tools/bench/history_signals.py): its statistics see only earlier seconds, by
hand; its stack finds a statistic that carries information the scores lack and none in noise; the command
runs end to end on a small generated MovieLens-shaped stream."""
import json

import numpy as np
import pytest

from tests.helpers.bench_scripts import bench_script

BENCH = bench_script("history_signals")
history_statistics, main, stacked_auc = BENCH["history_statistics"], BENCH["main"], BENCH["stacked_auc"]

# At time 7 user u rates b and c in the same second (MovieLens users do): neither sees the other.
RATINGS = [
    (1, "u", "a", 5),
    (2, "v", "a", 2),
    (3, "v", "b", 4),
    (7, "u", "b", 1),
    (7, "u", "c", 4),
    (9, "u", "a", 3),
]


def test_statistics_count_only_earlier_seconds():
    stats = history_statistics(RATINGS)
    assert list(np.expm1(stats["user_ratings"]).round()) == [0, 0, 1, 1, 1, 3]
    assert list(np.expm1(stats["movie_ratings"]).round()) == [0, 1, 0, 1, 0, 2]
    # the user's last rating, shrunk by one value of the mean of every earlier rating
    assert stats["user_last1"][3] == pytest.approx((5 + (5 + 2 + 4) / 3) / 2)
    assert stats["user_last1"][4] == stats["user_last1"][3]  # b's rating (1) is not yet c's history
    assert stats["user_last1"][5] == pytest.approx((4 + (5 + 2 + 4 + 1 + 4) / 5) / 2)  # c's, of the later second
    assert stats["user_gap"][3] == pytest.approx(np.log1p(6))
    assert stats["user_gap"][5] == pytest.approx(np.log1p(2))


def test_item_knn_needs_a_movie_rated_by_someone_with_the_users_movies():
    stats = history_statistics(RATINGS)
    # v rated a and b: when u (who rated a) rates b at 7, b is similar to a; u liked a above u's mean
    assert stats["item_knn_weight"][3] > 0
    assert stats["item_knn"][3] > 0
    # nobody had rated c with another movie before 7: no neighbour
    assert stats["item_knn_weight"][4] == 0 and stats["item_knn"][4] == 0
    # a like shared: v liked b, u liked a, but v did not like a: nothing co-liked yet
    assert stats["co_liked"][3] == 0


def test_the_stack_finds_information_the_scores_lack_and_none_in_noise():
    rng = np.random.default_rng(7)
    n = 20000
    score, hidden, noise = rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)
    labels = (rng.random(n) < 1 / (1 + np.exp(-(score + hidden)))).astype(float)
    half = n // 2
    base = stacked_auc(labels, score, [], half)
    assert stacked_auc(labels, score, [hidden], half) - base > 0.03
    assert abs(stacked_auc(labels, score, [noise], half) - base) < 0.003


def test_the_command_reads_saved_scores_and_prints_every_statistic(tmp_path, capsys):
    rng = np.random.default_rng(3)
    (tmp_path / "u.item").write_text("".join(f"{m}|M{m}|01-Jan-1995||u|0|1" + "|0" * 17 + "\n" for m in range(1, 31)),
                                     encoding="latin-1")
    lines, labels = [], []
    for t in range(1500):
        user, movie = int(rng.integers(1, 40)), int(rng.integers(1, 31))
        rating = int(np.clip(round(2 + movie / 10 + rng.normal()), 1, 5))
        lines.append(f"{user}\t{movie}\t{rating}\t{1000 + t}\n")
        labels.append(float(rating >= 4))
    (tmp_path / "u.data").write_text("".join(lines))
    scores = np.clip(np.array(labels) * 0.2 + rng.random(len(labels)) * 0.8, 0.01, 0.99)
    np.savez(tmp_path / "scores.npz", labels=np.array(labels), seeds=np.array([2026]),
             sequence=scores[None], single=(1 - scores)[None])
    assert main(["--data", str(tmp_path), "--scores", str(tmp_path / "scores.npz")]) == 0
    out = capsys.readouterr().out
    result = json.loads(out[:out.index("\n2nd half AUC")])
    table = out[out.index("\n2nd half AUC"):]
    for name in ("item_knn", "user_last10_liked", "movie_mean", "all", "both models + all"):
        assert f"  {name} " in table
    # the movie carries the rating here: its mean adds to scores that hold only part of the label
    assert result["models"]["single"]["gain"]["movie_mean"] > 0.01
    assert result["alone"]["movie_mean"] > 0.6

    np.savez(tmp_path / "other.npz", labels=1 - np.array(labels), seeds=np.array([2026]), sequence=scores[None])
    with pytest.raises(SystemExit, match="not those of"):
        main(["--data", str(tmp_path), "--scores", str(tmp_path / "other.npz")])
