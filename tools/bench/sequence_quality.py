"""Benchmark: a sequence model (DIN's target attention) on a real, time-ordered stream whose samples carry
behaviour sequences, against the same stream's single-task model without them.

MovieLens 100K's ratings, in time order, go through the local broker (one
partition: the order is kept) as ``label,user,movie,genres,hour,weekday,<sequences>``
lines (label = rating >= 4) and are trained online with ``--config``
(default samples/movielens_din.config). The sequences are the config's input
fields after ``weekday``, in its order, each one of ``SEQUENCES``, built here
from the ratings themselves, as a stream would carry them upstream: the
user's likes (``liked_movies``, rating >= 4), dislikes (``disliked_movies``,
<= 2), every rated movie (``rated_movies``) with its rating position by
position (``rated_ratings``); the users who liked (``movie_likers``) or
rated (``movie_raters``) the sample's movie, with their ratings
(``movie_rater_ratings``) or how far each was from its rater's mean
rating until then (``movie_rater_deviations``; as weighted tags
``movie_raters_above`` / ``movie_raters_below``); each of events strictly before this rating's
time (an event at the same second is not yet history), the most recent
first (EasyRec's convention, which ``sequence_length`` truncates), at most
``--history`` of them (default: the config's longest
``sequence_length``). In the same script ``--single_config`` (default
samples/movielens.config) trains the same ratings without the sequence
columns. Every batch is scored before it is trained on (prequential).

Prints JSON and a table: AUC overall, on the first half (where settings are
chosen) and on the second (where the target is judged), and the training
samples/s of both models (from the end of the first batch to the last; the
machine's other load counts). The target of issue 36 (second-half AUC >=
the single-task model's + 0.005) with ``--assert_targets`` exits 1 when
missed. ``--png`` writes windowed AUC of both (needs matplotlib, a dev
dependency). ``--seeds N`` trains both models with N seeds
(``train_config.seed``): the figures and the target are then the means.
``--scores_out`` saves every sample's scores for ``tools/bench/history_signals.py``.

``--data DIR``: MovieLens 100K's ``u.data`` and ``u.item``. MovieLens may
not be redistributed: fetch it to a temporary folder.

    .venv/bin/python tools/bench/sequence_quality.py --data /tmp/ml-100k [--png /tmp/sequence.png]
"""
import argparse
import json
import math
import os
import sys
import time
from collections import defaultdict
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from easyonline.config import load_pipeline_config  # noqa: E402
from easyonline.scoring.auc_curves import exact_auc as auc  # noqa: E402
from easyonline.scoring.auc_curves import plot_panels, windowed_auc  # noqa: E402
from tools.bench.learning_quality import movielens_timed_ratings  # noqa: E402
from tools.bench.multitask_quality import (comparison_arguments, halves, mean_halves,  # noqa: E402
                                          parse_comparison_arguments, train)

TARGET_GAIN = 0.005  # issue 36: the sequence model's second-half AUC >= the single-task model's + this


Event = Tuple[int, str, str, int]  # (time, user, movie, rating)
# An event with its rater's deviation: (time, user, movie, rating, the rating less the mean of that user's
# earlier ratings, or None for a user's first rating)
RatedEvent = Tuple[int, str, str, int, Optional[float]]


def _half_steps(deviation: Optional[float]) -> str:
    return "n" if deviation is None else f"{min(max(round(2 * deviation) / 2, -3.0), 3.0):+.1f}"


def _weight(user: str, weight: Optional[float]) -> str:
    """A weighted tag value; a weight <= 0 (or none) makes the parser drop the id."""
    return f"{user}:{max(weight or 0.0, 0.0):.2f}"

# The sequences the script builds, by the config's input field name (after ``weekday``): whose events (the
# sample's user's or its movie's), which ratings count, and what of each event the sequence holds.
SEQUENCES: Dict[str, Tuple[int, Callable[[int], bool], Callable[[Event], str]]] = {
    "liked_movies": (1, lambda r: r >= 4, lambda e: e[2]),  # the user's likes (rating >= 4)
    "disliked_movies": (1, lambda r: r <= 2, lambda e: e[2]),  # the user's dislikes (rating <= 2)
    "rated_movies": (1, lambda r: True, lambda e: e[2]),  # every movie the user rated ...
    "rated_ratings": (1, lambda r: True, lambda e: str(e[3])),  # ... and its rating, position by position
    "movie_likers": (2, lambda r: r >= 4, lambda e: e[1]),  # the users who liked the sample's movie
    "movie_raters": (2, lambda r: True, lambda e: e[1]),  # every user who rated the movie ...
    "movie_rater_ratings": (2, lambda r: True, lambda e: str(e[3])),  # ... and their rating
    # ... and how far their rating was from what they usually gave (their generosity taken out)
    "movie_rater_deviations": (2, lambda r: True, lambda e: _half_steps(e[4])),
    # weighted tags (kv_separator ":"): the raters who rated it above their own mean, by how much ...
    "movie_raters_above": (2, lambda r: True, lambda e: _weight(e[1], e[4])),
    # ... and those who rated it below, by how much
    "movie_raters_below": (2, lambda r: True, lambda e: _weight(e[1], None if e[4] is None else -e[4])),
}
# Item-based collaborative filtering's neighbourhood as sequences (SIM's hard search, Pi et al. 2020, done
# upstream): of the movies the sample's user rated before, those most like the sample's movie by their
# co-rating counts (``neighbours``), the user's rating of each, and how alike (a bucket of the cosine).
NEIGHBOURS = ("neighbour_movies", "neighbour_ratings", "neighbour_similarity")
SIMILARITY_BUCKETS = ((0.5, "s6"), (0.3, "s5"), (0.2, "s4"), (0.1, "s3"), (0.05, "s2"), (1e-9, "s1"))
FIELDS = 6  # label,user,movie,genres,hour,weekday: the single-task config's fields; the sequences follow


def past_events(ratings: Iterable[Event], by: int, keep: Callable[[int], bool], length: int) -> List[List[Event]]:
    """For each (time, user, movie, rating), in time order: the events of its user (``by`` 1) or its movie
    (``by`` 2) whose rating ``keep`` accepts, strictly before ``time``, the most recent first (equal times:
    the later in the stream first), at most ``length``. An event is history only for later samples, so no
    sample sees its own label, nor one given in the same second."""
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    if by not in (1, 2):
        raise ValueError(f"by must be 1 (the user's events) or 2 (the movie's), got {by}")
    kept: Dict[str, List[Event]] = {}  # per user or movie, oldest first
    out: List[List[Event]] = []
    last = None
    for event in ratings:
        stamp = event[0]
        if last is not None and stamp < last:
            raise ValueError(f"ratings must be in time order: {stamp} after {last}")
        last = stamp
        history = kept.setdefault(event[by], [])
        end = len(history)
        while end and history[end - 1][0] >= stamp:  # an event at this very time is not yet history
            end -= 1
        out.append(list(reversed(history[max(0, end - length):end])))
        if keep(event[3]):
            history.append(event)
    return out


def with_deviations(ratings: Iterable[Event]) -> List[RatedEvent]:
    """Each (time, user, movie, rating), in time order, with the rating less the mean of the user's ratings
    strictly before ``time`` (as a stream's upstream knows it then)."""
    totals: Dict[str, List[float]] = {}  # per user: [sum, count] of the ratings before the current time
    pending: List[Tuple[str, int]] = []  # the ratings of the current second, counted once it has passed
    out: List[RatedEvent] = []
    last = None
    for stamp, user, movie, rating in ratings:
        if stamp != last:
            for who, value in pending:
                total = totals.setdefault(who, [0.0, 0])
                total[0] += value
                total[1] += 1
            pending, last = [], stamp
        total = totals.get(user)
        deviation = None if total is None else rating - total[0] / total[1]
        out.append((stamp, user, movie, rating, deviation))
        pending.append((user, rating))
    return out


def similarity_bucket(similarity: float) -> str:
    """``neighbour_similarity``'s value: which of ``SIMILARITY_BUCKETS`` a cosine similarity falls in."""
    return next((name for edge, name in SIMILARITY_BUCKETS if similarity >= edge), "s0")


def neighbours(ratings: Sequence[Event], length: int) -> List[Tuple[List[str], List[str], List[str]]]:
    """For each (time, user, movie, rating), in time order: ``NEIGHBOURS``' three sequences, position by
    position: of the movies the user rated strictly before ``time``, the ``length`` most like the sample's
    movie (the most alike first; equal: the most recent first), the user's rating of each, and the bucket
    of its similarity. Similarity: the cosine of two movies' co-rating counts (users who had rated both,
    over the root of the product of each one's raters), all counted from ratings strictly before ``time``;
    a movie nobody rated with the sample's is 0 (bucket ``s0``) and comes after every similar one."""
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    co_rated: Dict[str, Dict[str, int]] = defaultdict(lambda: defaultdict(int))
    raters: Dict[str, int] = defaultdict(int)
    rated: Dict[str, List[Tuple[str, int]]] = defaultdict(list)  # per user: (movie, rating), oldest first
    pending: List[Event] = []  # the current second's ratings, history once it has passed
    out: List[Tuple[List[str], List[str], List[str]]] = []
    last = None
    for event in ratings:
        stamp, user, movie, rating = event[0], event[1], event[2], event[3]
        if last is not None and stamp < last:
            raise ValueError(f"ratings must be in time order: {stamp} after {last}")
        if stamp != last:
            for _, who, what, how in pending:
                for other, _ in rated[who]:
                    co_rated[what][other] += 1
                    co_rated[other][what] += 1
                raters[what] += 1
                rated[who].append((what, how))
            pending, last = [], stamp
        together = co_rated.get(movie, {})
        scored = []
        for position, (other, other_rating) in enumerate(rated.get(user, [])):
            shared = together.get(other, 0)
            similarity = shared / math.sqrt(raters[movie] * raters[other]) if shared else 0.0
            scored.append((similarity, position, other, other_rating))
        scored.sort(key=lambda x: (-x[0], -x[1]))
        top = scored[:length]
        out.append(([m for _, _, m, _ in top], [str(r) for _, _, _, r in top],
                    [similarity_bucket(sim) for sim, _, _, _ in top]))
        pending.append((stamp, user, movie, rating))
    return out


def histories(ratings: Sequence[Event], name: str, length: int = 20) -> List[List[str]]:
    """Sequence ``name`` of ``SEQUENCES`` (see ``past_events``) or ``NEIGHBOURS`` (``neighbours``) for each
    rating."""
    if name in NEIGHBOURS:
        return [row[NEIGHBOURS.index(name)] for row in neighbours(ratings, length)]
    if name not in SEQUENCES:
        raise ValueError(f"no sequence {name!r}; the script builds {sorted(SEQUENCES) + list(NEIGHBOURS)}")
    by, keep, value = SEQUENCES[name]
    return [[value(e) for e in events] for events in past_events(with_deviations(ratings), by, keep, length)]


def liked_histories(ratings: Iterable[Event], length: int = 20, min_rating: int = 4) -> List[List[str]]:
    """For each (time, user, movie, rating), in time order: the movies that user rated >= ``min_rating``
    strictly before ``time``, the most recent first, at most ``length`` (``past_events``)."""
    return [[e[2] for e in events] for events in past_events(ratings, 1, lambda r: r >= min_rating, length)]


def sequence_lines(directory: str, length: Union[int, Dict[str, int]],
                   names: Sequence[str] = ("liked_movies",)) -> List[bytes]:
    """u.data + u.item as time-ordered ``label,user,movie,genres,hour,weekday`` lines followed by one column
    per sequence of ``names`` (``histories``, joined by ``|``), each at most ``length`` events (one number for
    all, or one per name)."""
    if not os.path.exists(os.path.join(directory, "u.data")):
        raise SystemExit(f"{directory} holds no MovieLens u.data and u.item")
    ratings = movielens_timed_ratings(directory)
    events = [(r[0], r[1], r[2], r[3]) for r in ratings]
    lengths = length if isinstance(length, dict) else {name: length for name in names}
    found: Dict[int, list] = {}  # ``neighbours`` by length: one pass serves its three columns

    def column(name: str) -> List[List[str]]:
        if name not in NEIGHBOURS:
            return histories(events, name, lengths[name])
        if lengths[name] not in found:
            found[lengths[name]] = neighbours(events, lengths[name])
        return [row[NEIGHBOURS.index(name)] for row in found[lengths[name]]]
    columns = [column(name) for name in names]
    return [",".join([str(int(rating >= 4)), user, movie, genres, str(hour), str(weekday)]
                     + ["|".join(column[i]) for column in columns]).encode()
            for i, (_, user, movie, rating, genres, hour, weekday) in enumerate(ratings)]


def without_history(lines: Sequence[bytes]) -> List[bytes]:
    """The same samples as the single-task config reads them: the sequence columns dropped."""
    return [b",".join(line.split(b",")[:FIELDS]) for line in lines]


def config_sequences(config_path: str) -> List[str]:
    """The sequences ``config_path`` reads: its input fields after the single-task config's six, in order."""
    names = [field.input_name for field in load_pipeline_config(config_path).data_config.input_fields]
    if names[:FIELDS] != ["label", "user", "movie", "genres", "hour", "weekday"]:
        raise SystemExit(f"{config_path}: the first input fields must be label,user,movie,genres,hour,weekday; "
                         f"got {names[:FIELDS]}")
    unknown = [name for name in names[FIELDS:] if name not in SEQUENCES and name not in NEIGHBOURS]
    if unknown or len(names) == FIELDS:
        raise SystemExit(f"{config_path}: input fields {unknown or '(none)'} after weekday are not sequences "
                         f"this script builds: {sorted(SEQUENCES) + list(NEIGHBOURS)}")
    return names[FIELDS:]


def config_lengths(config_path: str, names: Sequence[str]) -> Dict[str, int]:
    """How many events of each sequence field of ``names`` the stream carries by default: the
    ``sequence_length`` of the SequenceFeature reading it (the longest, when several do), else 20 (the
    issue's; a field read only by a ComboFeature, say, is crossed whole)."""
    config = load_pipeline_config(config_path)
    lengths = {name: 0 for name in names}
    for f in config.feature_configs:
        if f.feature_type == f.SequenceFeature and f.sequence_length > 0 and f.input_names[0] in lengths:
            lengths[f.input_names[0]] = max(lengths[f.input_names[0]], f.sequence_length)
    return {name: length or 20 for name, length in lengths.items()}


def run_seed(args, lines: List[bytes], labels: np.ndarray, seed: Optional[int]) -> Dict:
    """Trains the sequence model (and the single-task one unless ``--skip_single``) with
    ``train_config.seed`` = ``seed`` (None: the configs' own); returns their figures and scores."""
    half = len(lines) // 2
    seeded = {} if seed is None else {"train_config.seed": seed}
    run: Dict = {"seed": seed, "single_scores": None, "samples_per_sec": {}}
    models = [("sequence", args.config, lines, args.edit_config_json)]
    if not args.skip_single:
        models.append(("single", args.single_config, without_history(lines), args.single_edit_config_json))
    for name, config, stream, edits in models:
        started = time.time()
        recorder = train(config, stream, dict(json.loads(edits), **seeded))
        run[f"{name}_secs"] = time.time() - started
        run["samples_per_sec"][name] = recorder.samples_per_sec()
        (task,) = recorder.labels  # a single-task model has one task
        got, run[f"{name}_scores"] = recorder.task(task)
        if not np.array_equal(got, labels):
            raise SystemExit(f"the {name} trainer's labels differ from the stream's (order or count)")
    run["auc"] = {name: None if run[f"{name}_scores"] is None else halves(auc, labels, run[f"{name}_scores"], half)
                  for name in ("sequence", "single")}
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="directory with MovieLens's u.data and u.item")
    parser.add_argument("--history", type=int, default=0,
                        help="events per sequence per sample, at most (the stream's); 0: for each sequence "
                             "field, the sequence_length of the SequenceFeature reading it (20 when none does)")
    comparison_arguments(parser, "movielens_din.config", "the windowed AUC plot")
    parser.add_argument("--scores_out", default="",
                        help="where to save the stream's labels and each seed's prequential scores of both "
                             "models (.npz: labels, seeds, sequence, single), for tools/bench/history_signals.py "
                             "('' : not saved)")
    args = parse_comparison_arguments(parser)
    names = config_sequences(args.config)
    history = args.history or config_lengths(args.config, names)
    args.history = history if isinstance(history, int) else max(history.values())
    lines = sequence_lines(args.data, history, names)
    n, half = len(lines), len(lines) // 2
    labels = np.array([float(line.split(b",", 1)[0]) for line in lines])
    tails = [line.split(b",")[FIELDS] for line in lines]  # the first sequence's
    lengths = np.array([len(tail.split(b"|")) if tail else 0 for tail in tails])
    first_seed = load_pipeline_config(args.config).train_config.seed
    seeds: List[Optional[int]] = [None] if args.seeds == 1 else [first_seed + k for k in range(args.seeds)]
    runs = [run_seed(args, lines, labels, seed) for seed in seeds]
    single_measured = not args.skip_single
    result: Dict = {
        "samples": n, "half": half, "seeds": [first_seed if s is None else s for s in seeds],
        "history": {"sequences": names, "at_most": args.history, "mean_length": float(lengths.mean()),
                    "empty_share": float((lengths == 0).mean())},
        "train_secs": {name: round(sum(r.get(f"{name}_secs", 0.0) for r in runs), 1)
                       for name in ("sequence", "single")},
        "samples_per_sec": {name: float(np.mean([r["samples_per_sec"][name] for r in runs]))
                            for name in runs[0]["samples_per_sec"]},
        "auc": {"sequence": mean_halves([r["auc"]["sequence"] for r in runs]),
                "single": mean_halves([r["auc"]["single"] for r in runs]) if single_measured else None},
    }
    if len(runs) > 1:
        result["per_seed"] = [{"seed": seed, "auc": r["auc"]} for seed, r in zip(result["seeds"], runs)]
    sequence_auc = result["auc"]["sequence"]["second_half"]
    single_auc = result["auc"]["single"]["second_half"] if single_measured else None
    result["auc"]["gain_second_half"] = None if single_auc is None else sequence_auc - single_auc
    result["targets"] = {f"AUC >= single + {TARGET_GAIN}":
                         None if single_auc is None else bool(sequence_auc >= single_auc + TARGET_GAIN)}
    print(json.dumps(result, indent=1))
    print_table(args, result, n, half)
    if args.png:
        plot(args, runs[0], labels, half)
    if args.scores_out:
        save_scores(args.scores_out, labels, result["seeds"], runs)
    met = list(result["targets"].values())
    return 0 if not args.assert_targets or all(m is True for m in met) else 1


def print_table(args, result: Dict, n: int, half: int) -> None:
    """The figures as a table: per seed when there are several, then their means."""
    history = result["history"]
    print(f"\n{n} samples, second half from {half}; {', '.join(history['sequences'])}: at most "
          f"{history['at_most']}; the first "
          f"{history['mean_length']:.1f} on average, empty in {100 * history['empty_share']:.1f}%"
          + (f"; seeds {result['seeds']}, figures their means" if len(result["seeds"]) > 1 else ""))

    def row(label: str, figures: Dict[str, float], rate: str = "") -> None:
        print(f"  {label:38}{figures['overall']:>10.4f}{figures['first_half']:>10.4f}"
              f"{figures['second_half']:>10.4f}{rate:>12}")

    names = {"sequence": os.path.basename(args.config), "single": os.path.basename(args.single_config)}
    print(f"{'AUC':40}{'overall':>10}{'1st half':>10}{'2nd half':>10}{'samples/s':>12}")
    for run in result.get("per_seed", []):
        for key, name in names.items():
            if run["auc"][key] is not None:
                row(f"{name}, seed {run['seed']}", run["auc"][key])
    mean = " (mean)" if len(result["seeds"]) > 1 else ""
    for key, name in names.items():
        if result["auc"][key] is not None:
            row(name + mean, result["auc"][key], f"{result['samples_per_sec'][key]:.0f}")
    if result["auc"]["gain_second_half"] is not None:
        print(f"  gain, 2nd half: {result['auc']['gain_second_half']:+.4f}")
    for target, met in result["targets"].items():
        print(f"  {target:38} {'not measured' if met is None else 'met' if met else 'MISSED'}")


def save_scores(path: str, labels: np.ndarray, seeds: List[int], runs: List[Dict]) -> None:
    """Labels and scores in stream order, one row a seed (``single`` is absent with ``--skip_single``)."""
    arrays = {"labels": labels, "seeds": np.array(seeds), "sequence": np.stack([r["sequence_scores"] for r in runs])}
    if runs[0]["single_scores"] is not None:
        arrays["single"] = np.stack([r["single_scores"] for r in runs])
    np.savez(path, **arrays)
    print(f"scores: {path}")


def plot(args, run: Dict, labels: np.ndarray, half: int) -> None:
    """Windowed AUC of both models (the first seed's run)."""
    step = max(args.window // 5, 1)
    names = config_sequences(args.config)
    read = ", ".join(names) if len(names) <= 2 else f"{len(names)} sequence columns"
    curves = {f"{os.path.basename(args.config)} (with {read})":
              windowed_auc(labels, run["sequence_scores"], args.window, step)}
    if run["single_scores"] is not None:
        curves[f"{os.path.basename(args.single_config)} (without)"] = windowed_auc(
            labels, run["single_scores"], args.window, step)
    title = f"{os.path.basename(args.config)} on {os.path.basename(args.data.rstrip('/'))}"
    if run["seed"] is not None:  # one of several seeds
        title += f", seed {run['seed']}"
    plot_panels(args.png, [("AUC of the last window (prequential)", curves)], half, "second half", title)
    print(f"plot: {args.png}")


if __name__ == "__main__":
    sys.exit(main())
