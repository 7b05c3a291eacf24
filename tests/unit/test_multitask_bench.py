"""The multi-task bench's arithmetic, by hand: the per-item running-mean baseline, the single-task lines,
and the windowed RMSE it plots (tools/bench/multitask_quality.py's, from easyonline/scoring/prequential.py,
easyonline/movielens/ratings.py and easyonline/scoring/auc_curves.py)."""
import math

import numpy as np
import pytest

from easyonline.scoring.auc_curves import rmse, windowed_rmse
from easyonline.movielens.ratings import single_task_lines
from easyonline.scoring.prequential import halves, item_mean_baseline, mean_halves


def test_the_baseline_predicts_each_items_mean_so_far_and_the_global_mean_for_a_new_item():
    items = ["a", "b", "a", "c", "b", "a"]
    ratings = np.array([4.0, 2.0, 5.0, 3.0, 1.0, 1.0])
    # a: none yet -> prior 3; b: new -> mean of {4} = 4; a: 4; c: new -> mean of {4, 2, 5} = 11/3;
    # b: 2; a: mean of {4, 5} = 4.5. Each rating is learned only after it was predicted.
    expected = [3.0, 4.0, 4.0, 11 / 3, 2.0, 4.5]
    assert item_mean_baseline(items, ratings) == pytest.approx(expected)
    assert item_mean_baseline(items[:1], ratings[:1], prior=3.5)[0] == 3.5


def test_the_single_task_lines_drop_the_rating_column_only():
    lines = [b"1,5,u1,m2,Drama|Comedy,13,4", b"0,2,u3,m2,,0,6"]
    assert single_task_lines(lines) == [b"1,u1,m2,Drama|Comedy,13,4", b"0,u3,m2,,0,6"]


def test_rmse_and_its_windows():
    labels = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    predictions = np.array([1.0, 4.0, 3.0, 4.0, 2.0, 6.0])  # errors 0, 2, 0, 0, -3, 0
    assert rmse(labels, predictions) == pytest.approx(math.sqrt(13 / 6))
    assert math.isnan(rmse([], []))
    # windows of 3 ending at 3, 5 (step 2): errors (0, 2, 0) -> sqrt(4/3); (0, 0, -3) -> sqrt(3)
    ends, values = windowed_rmse(labels, predictions, 3, 2)
    assert ends == [3, 5] and values == pytest.approx([math.sqrt(4 / 3), math.sqrt(3)])


def test_halves_and_their_means_over_seeds():
    labels = np.array([1.0, 2.0, 3.0, 4.0])
    predictions = np.array([1.0, 4.0, 3.0, 3.0])  # errors 0, 2 | 0, -1
    figures = halves(rmse, labels, predictions, 2)
    assert figures == pytest.approx({"overall": math.sqrt(5 / 4), "first_half": math.sqrt(2),
                                     "second_half": math.sqrt(1 / 2)})
    runs = [{"overall": 1.0, "second_half": 0.5}, {"overall": 2.0, "second_half": 0.7}]
    assert mean_halves(runs) == pytest.approx({"overall": 1.5, "second_half": 0.6})
