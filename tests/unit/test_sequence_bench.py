"""The sequences' histories, by hand (easyonline/movielens/sequences.py, which tools/bench/sequence_quality.py and
``python -m easyonline.tools.movielens_sequences`` use): each sample's liked movies are the user's likes strictly
before its time, likes only, the most recent first, at most ``length``; the other sequences the same way, of the
user's or the movie's events. And the bench's own saved scores."""
import numpy as np
import pytest

from easyonline.core.errors import ConfigError
from easyonline.movielens.sequences import (NEIGHBOURS, SEQUENCES, config_lengths, config_sequences, histories,
                                            liked_histories, neighbours, past_events, sequence_lines,
                                            similarity_bucket, with_deviations, without_history)
from tests.helpers.bench_scripts import bench_script


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


# Two users and two movies; at time 7 user u rates b, c and d in the same second (MovieLens does).
RATINGS = [
    (1, "u", "a", 5),
    (2, "v", "a", 2),
    (3, "v", "b", 4),
    (7, "u", "b", 1),
    (7, "u", "a", 4),
    (7, "v", "a", 3),
    (9, "u", "b", 5),
    (9, "v", "b", 2),
]


@pytest.mark.parametrize("name, want", [
    # the user's events: before the sample's second only, the most recent first
    ("disliked_movies", [[], [], ["a"], [], [], ["a"], ["b"], ["a"]]),
    ("rated_movies", [[], [], ["a"], ["a"], ["a"], ["b", "a"], ["a", "b", "a"], ["a", "b", "a"]]),
    ("rated_ratings", [[], [], ["2"], ["5"], ["5"], ["4", "2"], ["4", "1", "5"], ["3", "4", "2"]]),
    # the movie's events: the users who rated (liked) it before, the most recent first
    ("movie_likers", [[], ["u"], [], ["v"], ["u"], ["u"], ["v"], ["v"]]),
    ("movie_raters", [[], ["u"], [], ["v"], ["v", "u"], ["v", "u"], ["u", "v"], ["u", "v"]]),
    ("movie_rater_ratings", [[], ["5"], [], ["4"], ["2", "5"], ["2", "5"], ["1", "4"], ["1", "4"]]),
    # and how far each rating was from its rater's mean before it ("n": the rater's first rating)
    ("movie_rater_deviations", [[], ["n"], [], ["+2.0"], ["n", "n"], ["n", "n"], ["-3.0", "+2.0"],
                                ["-3.0", "+2.0"]]),  # (u's 1 at time 7 is 4 below the 5 before it: cut to -3)
    # the same as weighted tags, raters above their mean and below it (weight 0: the parser drops the id)
    ("movie_raters_above", [[], ["u:0.00"], [], ["v:2.00"], ["v:0.00", "u:0.00"], ["v:0.00", "u:0.00"],
                            ["u:0.00", "v:2.00"], ["u:0.00", "v:2.00"]]),
    ("movie_raters_below", [[], ["u:0.00"], [], ["v:0.00"], ["v:0.00", "u:0.00"], ["v:0.00", "u:0.00"],
                            ["u:4.00", "v:0.00"], ["u:4.00", "v:0.00"]]),
])
def test_each_sequence_holds_earlier_events_only_most_recent_first(name, want):
    assert histories(RATINGS, name) == want


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_each_sequence_keeps_the_most_recent_events_only(name):
    # one user rates 30 movies, then 30 users rate one movie, each rating one the sequence keeps: it fills up
    by, keep, value = SEQUENCES[name]
    rating = 5 if keep(5) else 1
    ratings = [(t, "u", f"m{t}", rating) for t in range(30)] + [(30 + t, f"u{t}", "m", rating) for t in range(30)]
    last = ratings[29] if by == 1 else ratings[59]
    rated = with_deviations(ratings)
    longest = [value(e) for e in (rated[28:8:-1] if by == 1 else rated[58:38:-1])]
    got = histories(ratings, name, length=20)
    assert len(got[ratings.index(last)]) == 20 and got[ratings.index(last)] == longest
    assert histories(ratings, name, length=3)[ratings.index(last)] == longest[:3]
    assert histories(ratings, name, length=0)[ratings.index(last)] == []
    assert max(len(h) for h in got) == 20


def test_deviations_count_only_ratings_of_earlier_seconds():
    got = with_deviations([(1, "u", "a", 5), (1, "u", "b", 1), (2, "u", "c", 4), (3, "v", "c", 2)])
    assert [e[4] for e in got] == [None, None, 1.0, None]  # the same second's ratings are not yet known
    assert [e[:4] for e in got] == [(1, "u", "a", 5), (1, "u", "b", 1), (2, "u", "c", 4), (3, "v", "c", 2)]


def test_past_events_refuses_a_bad_group_and_histories_an_unknown_name():
    with pytest.raises(ValueError, match="by must be"):
        past_events([], 3, lambda r: True, 20)
    with pytest.raises(ValueError, match="no sequence 'watched'"):
        histories([], "watched")


def test_the_lines_carry_every_sequence_the_config_reads_in_its_order(tmp_path):
    (tmp_path / "u.item").write_text("1|A|01-Jan-1995||u|0|0|0|1|0|0|0|0|1|0|0|0|0|0|0|0|0|0|0\n"
                                     "2|B|01-Jan-1995||u|0|0|0|0|0|1|0|0|0|0|0|0|0|0|0|0|0|0|0\n", encoding="latin-1")
    (tmp_path / "u.data").write_text("7\t2\t4\t200\n7\t1\t2\t100\n8\t2\t5\t300\n")
    lines = sequence_lines(str(tmp_path), 20, ["rated_movies", "rated_ratings", "movie_raters"])
    assert lines == [b"0,7,1,Animation|Drama,0,3,,,", b"1,7,2,Comedy,0,3,1,2,", b"1,8,2,Comedy,0,3,,,7"]
    assert without_history(lines) == [b"0,7,1,Animation|Drama,0,3", b"1,7,2,Comedy,0,3", b"1,8,2,Comedy,0,3"]
    # a length per sequence: user 8's sample has movie 2's one earlier rater, or none
    lengths = {"rated_movies": 20, "rated_ratings": 20, "movie_raters": 0}
    assert sequence_lines(str(tmp_path), lengths, ["rated_movies", "rated_ratings", "movie_raters"])[2] == \
        b"1,8,2,Comedy,0,3,,,"
    config = tmp_path / "x.config"
    fields = "".join(f'input_fields {{ input_name: "{n}" input_type: STRING }} '
                     for n in ["user", "movie", "genres", "hour", "weekday", "movie_raters", "rated_movies"])
    config.write_text(f'data_config {{ input_fields {{ input_name: "label" input_type: INT32 }} {fields} }}')
    assert config_sequences(str(config)) == ["movie_raters", "rated_movies"]
    config.write_text(f'data_config {{ input_fields {{ input_name: "label" input_type: INT32 }} {fields} '
                      'input_fields { input_name: "watched" input_type: STRING } }')
    with pytest.raises(ConfigError, match="watched"):
        config_sequences(str(config))


def test_the_stream_carries_as_many_events_of_each_sequence_as_the_feature_reading_it_keeps(tmp_path):
    config = tmp_path / "x.config"
    features = "".join(f'feature_configs {{ input_names: "{name}" feature_type: SequenceFeature separator: "|" '
                       f'embedding_dim: 4 sequence_length: {length} }} '
                       for name, length in (("movie_raters", 100), ("movie_rater_ratings", 50), ("movie_raters", 30)))
    crossed = ('feature_configs { feature_name: "liked_x_movie" input_names: ["liked_movies", "movie"] '
               'feature_type: ComboFeature combo_input_seps: ["|", ""] embedding_dim: 4 } ')
    config.write_text(features + crossed + 'feature_configs { input_names: "user" feature_type: IdFeature embedding_dim: 4 }')
    names = ["movie_raters", "movie_rater_ratings", "liked_movies"]
    # the longest reader of a field; a field no SequenceFeature reads (only crossed): the 20
    assert config_lengths(str(config), names) == {"movie_raters": 100, "movie_rater_ratings": 50, "liked_movies": 20}


def test_saved_scores_keep_the_stream_order_one_row_a_seed(tmp_path):
    save_scores = bench_script("sequence_quality")["save_scores"]
    labels = np.array([1.0, 0.0, 1.0])
    runs = [{"sequence_scores": np.array([0.9, 0.2, 0.6]), "single_scores": np.array([0.8, 0.3, 0.5])},
            {"sequence_scores": np.array([0.7, 0.1, 0.4]), "single_scores": np.array([0.6, 0.2, 0.3])}]
    save_scores(str(tmp_path / "s.npz"), labels, [2026, 2027], runs)
    saved = np.load(tmp_path / "s.npz")
    assert list(saved["seeds"]) == [2026, 2027]
    assert np.array_equal(saved["labels"], labels)
    assert np.array_equal(saved["sequence"][1], runs[1]["sequence_scores"])
    assert np.array_equal(saved["single"][0], runs[0]["single_scores"])
    save_scores(str(tmp_path / "t.npz"), labels, [2026], [dict(runs[0], single_scores=None)])  # --skip_single
    assert "single" not in np.load(tmp_path / "t.npz")


# v, then w, then u rate some of movies a..d; u rates c and b in one second (6), then d; then w rates b.
NEIGHBOUR_RATINGS = [
    (1, "v", "a", 4),
    (2, "v", "b", 5),
    (3, "w", "a", 3),
    (4, "w", "c", 2),
    (5, "u", "a", 5),
    (6, "u", "c", 1),
    (6, "u", "b", 4),
    (8, "u", "d", 3),
    (10, "w", "b", 4),
]


def test_neighbours_are_the_users_earlier_movies_most_alike_first():
    got = neighbours(NEIGHBOUR_RATINGS, 20)
    assert got[0] == ([], [], [])
    # nobody had rated b with a by time 2: a is v's movie, but not yet alike (s0)
    assert got[1] == (["a"], ["4"], ["s0"])
    # at 6, c had been rated by w with a: cosine 1 / sqrt(1 rater of c x 3 of a) = 0.58 (s6); b the same
    # way by v; neither of u's two ratings at 6 is history for the other
    assert got[5] == (["a"], ["5"], ["s6"]) and got[6] == (["a"], ["5"], ["s6"])
    # nobody had rated d: every earlier movie is 0, the most recent first
    assert got[7] == (["b", "c", "a"], ["4", "1", "5"], ["s0", "s0", "s0"])
    # b against w's a: 2 co-ratings / sqrt(2 x 3) = 0.82; against c: 1 / sqrt(2 x 2) = 0.5; alike beats recent
    assert got[8] == (["a", "c"], ["3", "2"], ["s6", "s6"])
    assert neighbours(NEIGHBOUR_RATINGS, 1)[8] == (["a"], ["3"], ["s6"])
    assert neighbours(NEIGHBOUR_RATINGS, 0)[8] == ([], [], [])
    for position, name in enumerate(NEIGHBOURS):
        assert histories(NEIGHBOUR_RATINGS, name) == [row[position] for row in got]


def test_similarity_buckets_and_neighbours_refuse_disorder():
    assert [similarity_bucket(s) for s in (0.0, 0.01, 0.05, 0.15, 0.25, 0.3, 0.7, 1.2)] == \
        ["s0", "s1", "s2", "s3", "s4", "s5", "s6", "s6"]
    with pytest.raises(ValueError, match="time order"):
        neighbours([(5, "u", "a", 5), (4, "u", "b", 5)], 20)
    with pytest.raises(ValueError, match="length"):
        neighbours([], -1)


def test_the_lines_carry_the_neighbour_sequences_position_by_position(tmp_path):
    (tmp_path / "u.item").write_text("".join(f"{m}|M|01-Jan-1995||u|0|1" + "|0" * 17 + "\n" for m in (1, 2, 3)),
                                     encoding="latin-1")
    # user 7 rates 1 then 2; user 8 rates 1 then 3, then 2: 2 is like 1 (user 7 rated both)
    (tmp_path / "u.data").write_text("7\t1\t5\t100\n7\t2\t4\t200\n8\t1\t2\t300\n8\t3\t1\t400\n8\t2\t3\t500\n")
    lines = sequence_lines(str(tmp_path), 20, list(NEIGHBOURS))
    # 2 against 1: 1 co-rating / sqrt(1 x 2) = 0.71; against 3: none
    assert lines[4] == b"0,8,2,Action,0,3,1|3,2|1,s6|s0"
    assert lines[3] == b"0,8,3,Action,0,3,1,2,s0"
