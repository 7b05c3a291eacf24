"""The behaviour sequences samples/movielens_din.config reads, built from the events strictly before each sample.

A sequence is upstream's knowledge at the sample's time: the user's earlier likes, dislikes and ratings, the
movie's earlier raters and their ratings (or how far each was from its rater's own mean), and, of the movies
the user rated before, those most like the sample's movie (item-based collaborative filtering's neighbourhood:
SIM's hard search, Pi et al. 2020, done upstream). Each holds events strictly before the sample's time (an
event of the same second is not yet history, so no sample sees its own label nor one given with it), the most
recent (or the most alike) first, at most the length the config's SequenceFeature keeps. Serving must be
given the same sequences, built the same way from the events before the request
(docs/config_reference.md, "Building a sequence upstream").

Installed, not a bench's, so that a user of the sample can build its input:
``python -m easyonline.tools.movielens_sequences``. A config's sequences are its input fields after the
single-task six (``label,user,movie,genres,hour,weekday``), each one of ``SEQUENCES`` or ``NEIGHBOURS``.
"""
import math
from collections import defaultdict
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, TypeVar, Union

from easyonline.config import load_pipeline_config
from easyonline.core.errors import ConfigError
from easyonline.movielens.ratings import LIKED, SINGLE_TASK_FIELDS, Rating, read_movielens, single_task_line

Event = Tuple[int, str, str, int]  # (time, user, movie, rating)
# An event with its rater's deviation: (time, user, movie, rating, the rating less the mean of that user's
# earlier ratings, or None for a user's first rating)
RatedEvent = Tuple[int, str, str, int, Optional[float]]
AnyEvent = TypeVar("AnyEvent", Event, RatedEvent)


def _half_steps(deviation: Optional[float]) -> str:
    return "n" if deviation is None else f"{min(max(round(2 * deviation) / 2, -3.0), 3.0):+.1f}"


def _weight(user: str, weight: Optional[float]) -> str:
    """A weighted tag value; a weight <= 0 (or none) makes the parser drop the id."""
    return f"{user}:{max(weight or 0.0, 0.0):.2f}"

# The sequences this module builds, by the config's input field name (after ``weekday``): whose events (the
# sample's user's or its movie's), which ratings count, and what of each event the sequence holds.
SEQUENCES: Dict[str, Tuple[int, Callable[[int], bool], Callable[[RatedEvent], str]]] = {
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
FIELDS = len(SINGLE_TASK_FIELDS)  # the single-task config's fields; the sequences follow
DEFAULT_LENGTH = 20  # events of a sequence no SequenceFeature reads (a ComboFeature crosses it whole)


def past_events(ratings: Iterable[AnyEvent], by: int, keep: Callable[[int], bool],
                length: int) -> List[List[AnyEvent]]:
    """For each (time, user, movie, rating), in time order: the events of its user (``by`` 1) or its movie
    (``by`` 2) whose rating ``keep`` accepts, strictly before ``time``, the most recent first (equal times:
    the later in the stream first), at most ``length``. An event is history only for later samples, so no
    sample sees its own label, nor one given in the same second."""
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    if by not in (1, 2):
        raise ValueError(f"by must be 1 (the user's events) or 2 (the movie's), got {by}")
    kept: Dict[str, List[AnyEvent]] = {}  # per user or movie, oldest first
    out: List[List[AnyEvent]] = []
    last = None
    for event in ratings:
        stamp = event[0]
        if last is not None and stamp < last:
            raise ValueError(f"ratings must be in time order: {stamp} after {last}")
        last = stamp
        history = kept.setdefault(event[1] if by == 1 else event[2], [])
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
        known = totals.get(user)
        deviation = None if known is None else rating - known[0] / known[1]
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
        raise ValueError(f"no sequence {name!r}; this module builds {sorted(SEQUENCES) + list(NEIGHBOURS)}")
    by, keep, value = SEQUENCES[name]
    return [[value(e) for e in events] for events in past_events(with_deviations(ratings), by, keep, length)]


def liked_histories(ratings: Iterable[Event], length: int = 20, min_rating: int = LIKED) -> List[List[str]]:
    """For each (time, user, movie, rating), in time order: the movies that user rated >= ``min_rating``
    strictly before ``time``, the most recent first, at most ``length`` (``past_events``)."""
    return [[e[2] for e in events] for events in past_events(ratings, 1, lambda r: r >= min_rating, length)]


def sample_lines(ratings: Sequence[Rating], length: Union[int, Dict[str, int]],
                 names: Sequence[str] = ("liked_movies",)) -> List[bytes]:
    """Time-ordered ratings as ``label,user,movie,genres,hour,weekday`` lines followed by one column per
    sequence of ``names`` (``histories``, joined by ``|``), each at most ``length`` events (one number for
    all, or one per name)."""
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
    return [b",".join([single_task_line(rating)] + ["|".join(column[i]).encode() for column in columns])
            for i, rating in enumerate(ratings)]


def sequence_lines(directory: str, length: Union[int, Dict[str, int]],
                   names: Sequence[str] = ("liked_movies",)) -> List[bytes]:
    """``sample_lines`` of MovieLens's u.data + u.item in ``directory`` (``ratings.read_movielens``)."""
    return sample_lines(read_movielens(directory), length, names)


def without_history(lines: Sequence[bytes]) -> List[bytes]:
    """The same samples as the single-task config reads them: the sequence columns dropped."""
    return [b",".join(line.split(b",")[:FIELDS]) for line in lines]


def config_sequences(config_path: str) -> List[str]:
    """The sequences ``config_path`` reads: its input fields after the single-task config's six, in order."""
    names = [field.input_name for field in load_pipeline_config(config_path).data_config.input_fields]
    if names[:FIELDS] != list(SINGLE_TASK_FIELDS):
        raise ConfigError("data_config.input_fields", f"{config_path}: the first input fields must be "
                          f"{','.join(SINGLE_TASK_FIELDS)}; got {','.join(names[:FIELDS])}")
    unknown = [name for name in names[FIELDS:] if name not in SEQUENCES and name not in NEIGHBOURS]
    if unknown or len(names) == FIELDS:
        raise ConfigError("data_config.input_fields", f"{config_path}: input fields {unknown or '(none)'} after "
                          f"weekday are not sequences this module builds: {sorted(SEQUENCES) + list(NEIGHBOURS)}")
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
    return {name: length or DEFAULT_LENGTH for name, length in lengths.items()}
