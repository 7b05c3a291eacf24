"""The sequence bench's histories, by hand (tools/bench/sequence_quality.py): each sample's liked movies are the
user's likes strictly before its time, likes only, the most recent first, at most ``length``."""
import pytest

from tools.bench.sequence_quality import liked_histories, sequence_lines, without_history


def test_a_history_holds_the_users_earlier_likes_only_most_recent_first():
    ratings = [
        (10, "u1", "a", 5),  # liked: history for u1's later samples
        (11, "u2", "b", 4),  # another user's like is never u1's
        (12, "u1", "c", 2),  # not liked: never in a history
        (13, "u1", "d", 4),
        (14, "u1", "e", 3),
        (15, "u2", "f", 1),
    ]
    assert liked_histories(ratings) == [[], [], ["a"], ["a"], ["d", "a"], ["b"]]


def test_a_like_at_the_same_time_is_not_yet_history():
    # MovieLens users rate many movies in one second: none of them may see another's label
    ratings = [(1, "u", "a", 5), (7, "u", "b", 5), (7, "u", "c", 4), (7, "u", "d", 1), (8, "u", "e", 3)]
    assert liked_histories(ratings) == [[], ["a"], ["a"], ["a"], ["c", "b", "a"]]


def test_a_history_keeps_the_most_recent_likes_only():
    ratings = [(t, "u", f"m{t}", 5) for t in range(30)]
    histories = liked_histories(ratings, length=20)
    assert [len(h) for h in histories] == [min(t, 20) for t in range(30)]
    assert histories[29] == [f"m{t}" for t in range(28, 8, -1)]
    assert liked_histories(ratings, length=3)[29] == ["m28", "m27", "m26"]
    assert liked_histories(ratings, length=0)[29] == []


def test_ratings_out_of_time_order_or_a_negative_length_are_refused():
    with pytest.raises(ValueError, match="time order"):
        liked_histories([(5, "u", "a", 5), (4, "u", "b", 5)])
    with pytest.raises(ValueError, match="length"):
        liked_histories([], length=-1)


def test_the_lines_carry_the_history_last_and_the_single_task_lines_drop_it(tmp_path):
    (tmp_path / "u.item").write_text("1|A|01-Jan-1995||u|0|0|0|1|0|0|0|0|1|0|0|0|0|0|0|0|0|0|0\n"
                                     "2|B|01-Jan-1995||u|0|0|0|0|0|1|0|0|0|0|0|0|0|0|0|0|0|0|0\n", encoding="latin-1")
    # u.data: user movie rating time, not in time order (the lines are)
    (tmp_path / "u.data").write_text("7\t2\t4\t200\n7\t1\t5\t100\n8\t2\t5\t300\n")
    lines = sequence_lines(str(tmp_path), 20)
    # 100 s and 200 s after the epoch: 00:01 and 00:03 UTC on a Thursday (weekday 3)
    assert lines == [b"1,7,1,Animation|Drama,0,3,", b"1,7,2,Comedy,0,3,1", b"1,8,2,Comedy,0,3,"]
    assert without_history(lines) == [b"1,7,1,Animation|Drama,0,3", b"1,7,2,Comedy,0,3", b"1,8,2,Comedy,0,3"]
