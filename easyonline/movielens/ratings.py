"""MovieLens-shaped ratings: read from MovieLens 100K's files or from a time-ordered stream of rating events,
and written as the MovieLens samples' lines.

One reader for the command that builds samples/movielens_din.config's input, the quality benches and their
tests, so that they cannot disagree on a label, a genre or an hour. A rating is (time, user, movie, rating,
genres joined by ``|``, hour, weekday): time in Unix seconds, hour and weekday (0 = Monday) in UTC from it.

A stream of rating events (what an upstream system would log) is one event a line, in time order::

    <unix seconds>,<user>,<movie>,<rating>,<genres joined by |, possibly empty>

e.g. ``881250949,196,242,3,Comedy``. The samples' lines are derived from it: samples/movielens.config reads
``label,user,movie,genres,hour,weekday`` (label: rating >= 4), samples/movielens_multitask.config
``liked,rating,user,movie,genres,hour,weekday``, samples/movielens_din.config the single-task fields followed
by its sequences (``easyonline/movielens/sequences.py``).
"""
import os
import time
from typing import Iterable, List, Sequence, Tuple, Union

from easyonline.core.errors import BadInputError

GENRES = ["unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary", "Drama",
          "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller", "War", "Western"]
LIKED = 4  # a rating >= this is a like: the samples' label
SINGLE_TASK_FIELDS = ("label", "user", "movie", "genres", "hour", "weekday")

# (time, user, movie, rating, genres, hour, weekday)
Rating = Tuple[int, str, str, int, str, int, int]


def rating_of(stamp: int, user: str, movie: str, rating: int, genres: str) -> Rating:
    """A rating with its hour and weekday (UTC) from ``stamp``."""
    t = time.gmtime(stamp)
    return (stamp, user, movie, rating, genres, t.tm_hour, t.tm_wday)


def read_movielens(directory: str) -> List[Rating]:
    """MovieLens 100K's ``u.data`` (user, movie, rating, time; tab-separated) and ``u.item`` (the movie's 19
    genre flags) in ``directory`` as ratings in time order (equal times keep the file's order)."""
    for name in ("u.data", "u.item"):
        if not os.path.isfile(os.path.join(directory, name)):
            raise FileNotFoundError(f"{directory} holds no MovieLens {name} (u.data and u.item are read)")
    genres = {}
    with open(os.path.join(directory, "u.item"), encoding="latin-1") as f:
        for line in f:
            fields = line.rstrip("\n").split("|")
            genres[fields[0]] = "|".join(g for g, flag in zip(GENRES, fields[5:]) if flag == "1")
    ratings = []
    with open(os.path.join(directory, "u.data")) as f:
        for number, line in enumerate(f, 1):
            fields = line.split()
            if len(fields) != 4 or not (fields[2].isdigit() and fields[3].isdigit()):
                raise BadInputError(f"{directory}/u.data line {number}: want user, movie, rating, time; "
                                    f"got {line.rstrip()!r}")
            user, movie, rating, stamp = fields
            if movie not in genres:
                raise BadInputError(f"{directory}/u.data line {number}: movie {movie} is not in u.item")
            ratings.append((int(stamp), user, movie, int(rating)))
    ratings.sort(key=lambda r: r[0])  # stable: equal times keep the file's order
    return [rating_of(stamp, user, movie, rating, genres[movie]) for stamp, user, movie, rating in ratings]


def parse_events(lines: Iterable[Union[bytes, str]], where: str = "the input") -> List[Rating]:
    """Rating events (``time,user,movie,rating,genres``, the module's format) as ratings; blank lines are
    skipped. A malformed line, or one earlier than the line before it, raises BadInputError naming it."""
    out: List[Rating] = []
    for number, raw in enumerate(lines, 1):
        line = (raw.decode("utf-8") if isinstance(raw, bytes) else raw).strip()
        if not line:
            continue
        fields = line.split(",")
        if len(fields) != 5 or not fields[0].isdigit() or not fields[3].isdigit() or not fields[1] or not fields[2]:
            raise BadInputError(f"{where}, line {number}: want time,user,movie,rating,genres (time and rating "
                                f"whole numbers); got {line!r}")
        stamp = int(fields[0])
        if out and stamp < out[-1][0]:
            raise BadInputError(f"{where}, line {number}: time {stamp} is before the previous line's {out[-1][0]}: "
                                "the events must be in time order")
        out.append(rating_of(stamp, fields[1], fields[2], int(fields[3]), fields[4]))
    return out


def event_line(rating: Rating) -> bytes:
    """``rating`` in the event format (``parse_events`` reads it back)."""
    return f"{rating[0]},{rating[1]},{rating[2]},{rating[3]},{rating[4]}".encode()


def single_task_line(rating: Rating) -> bytes:
    """samples/movielens.config's line: ``label,user,movie,genres,hour,weekday`` (label: rating >= 4)."""
    _, user, movie, value, genres, hour, weekday = rating
    return f"{int(value >= LIKED)},{user},{movie},{genres},{hour},{weekday}".encode()


def multitask_line(rating: Rating) -> bytes:
    """samples/movielens_multitask.config's line: ``liked,rating,user,movie,genres,hour,weekday``."""
    _, user, movie, value, genres, hour, weekday = rating
    return f"{int(value >= LIKED)},{value},{user},{movie},{genres},{hour},{weekday}".encode()


def single_task_lines(lines: Sequence[bytes]) -> List[bytes]:
    """Multi-task lines as the single-task config reads the same samples: the rating column dropped."""
    out = []
    for line in lines:
        liked, _, rest = line.split(b",", 2)
        out.append(liked + b"," + rest)
    return out
