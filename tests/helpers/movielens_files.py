"""Generated MovieLens-shaped files, for the tests of the MovieLens samples' streams.

MovieLens itself may not be redistributed, so tests write files of its shape: ``u.item`` (19 genre flags)
and ``u.data`` (user, movie, rating, time; several ratings in one second, as MovieLens has them).
"""
import numpy as np


def movielens_files(directory, count: int, seed: int = 13) -> None:
    """``count`` ratings from the user's bias, the movie's quality and the user's taste per genre, in time order
    (three a second) into ``directory``/u.data, the 60 movies' genres into ``directory``/u.item."""
    rng = np.random.default_rng(seed)
    users, movies, genres = 40, 60, 19
    flags = rng.random((movies, genres)) < 0.15
    with open(directory / "u.item", "w", encoding="latin-1") as f:
        for m in range(movies):
            f.write(f"{m + 1}|Movie {m}|01-Jan-1995||http://x|" + "|".join(str(int(x)) for x in flags[m]) + "\n")
    bias, quality, taste = rng.normal(0, 0.6, users), rng.normal(0, 0.8, movies), rng.normal(0, 0.8, (users, genres))
    with open(directory / "u.data", "w") as f:
        for i in range(count):
            user, movie = int(rng.integers(users)), int(rng.integers(movies))
            liked_genres = taste[user, flags[movie]]
            mean = 3.5 + bias[user] + quality[movie] + (liked_genres.mean() if len(liked_genres) else 0.0)
            rating = int(np.clip(np.rint(mean + rng.normal(0, 0.5)), 1, 5))
            f.write(f"{user + 1}\t{movie + 1}\t{rating}\t{880000000 + i // 3}\n")
