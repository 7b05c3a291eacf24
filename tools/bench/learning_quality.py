"""Benchmark: how well online training learns a real, time-ordered stream, against a plain online LR.

The stream's lines (``label,user,movie,genres,hour,weekday``) go through
the local broker (one partition: the stream's order is kept) and are
trained online with ``--config`` (default samples/movielens.config). Every
batch is scored before it is trained on (prequential), and the model is
copied once half the stream was trained: that frozen copy scores every
later sample. In the same process, a plain online logistic regression
(hashed features: bias, user, movie, hour, weekday, each genre, user x
genre; per-sample Adagrad, learning rate 0.1) scores and learns the same
lines in the same order.

Prints JSON and a table: prequential AUC overall and on the second half,
for easyonline, its frozen copy and the LR; the targets of the learning
quality issue (second half >= 0.78, >= LR + 0.02, >= frozen + 0.08) with
``--assert_targets`` exits 1 when one is missed. Writes a PNG of windowed
AUC over the stream (``--png``; needs matplotlib, a dev dependency).

``--data DIR``: a directory holding ``stream.csv`` (lines as above), or
MovieLens 100K's ``u.data`` and ``u.item`` (turned into that stream: label
= rating >= 4, genres joined by ``|``, hour and weekday in UTC, ordered by
time). MovieLens may not be redistributed: fetch it to a temporary folder.

    .venv/bin/python tools/bench/learning_quality.py --data /tmp/ml-100k [--png /tmp/quality.png]
"""
import argparse
import json
import math
import os
import sys
import tempfile
import time
import zlib
from typing import List, Optional

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import easyonline  # noqa: E402,F401  (sets TF_USE_LEGACY_KERAS first)
from easyonline.core.callbacks import Callback  # noqa: E402
from easyonline.movielens.ratings import read_movielens, single_task_line  # noqa: E402
from easyonline.scoring.auc_curves import exact_auc as auc, plot_auc_curves, windowed_auc  # noqa: E402
from easyonline.scoring.checkpoint_model import CheckpointModel  # noqa: E402
from easyonline.tools.prequential import train_online  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def read_stream(directory: str) -> List[bytes]:
    path = os.path.join(directory, "stream.csv")
    if os.path.exists(path):
        with open(path, "rb") as f:
            return [line for line in f.read().splitlines() if line]
    if os.path.exists(os.path.join(directory, "u.data")):
        return [single_task_line(rating) for rating in read_movielens(directory)]
    raise SystemExit(f"{directory} holds neither stream.csv nor MovieLens's u.data and u.item")


class OnlineLogisticRegression:
    """The baseline: hashed features, per-sample Adagrad, scored before each update."""

    def __init__(self, learning_rate: float = 0.1, buckets: int = 1 << 22):
        self.learning_rate = learning_rate
        self.buckets = buckets
        self.weights = np.zeros(buckets)
        self.squares = np.full(buckets, 1e-8)

    def features(self, fields: List[str]) -> List[int]:
        user, movie, genres, hour, weekday = fields[1:6]
        names = ["bias", "u" + user, "m" + movie, "h" + hour, "w" + weekday]
        for genre in filter(None, genres.split("|")):
            names += ["g" + genre, f"ug{user}_{genre}"]
        return [zlib.crc32(name.encode()) % self.buckets for name in names]

    def run(self, lines: List[bytes]) -> np.ndarray:
        scores = np.empty(len(lines))
        for i, line in enumerate(lines):
            fields = line.decode().split(",")
            index = self.features(fields)
            z = self.weights[index].sum()
            p = 1 / (1 + math.exp(-max(min(z, 30), -30)))
            scores[i] = p
            g = p - int(fields[0])
            self.squares[index] += g * g
            self.weights[index] -= self.learning_rate * g / np.sqrt(self.squares[index])
        return scores


class Recorder(Callback):
    """Keeps every batch's prequential scores; freezes a copy of the model once ``half`` samples were trained
    and scores every later batch with it too; stops the trainer after ``total``."""

    def __init__(self, half: int, total: int, frozen_dir: str):
        self.half, self.total, self.frozen_dir = half, total, frozen_dir
        self.labels: List[np.ndarray] = []
        self.scores: List[np.ndarray] = []
        self.frozen_scores: List[np.ndarray] = []
        self.frozen_at: Optional[int] = None
        self.frozen: Optional[CheckpointModel] = None
        self.seen = 0

    def on_batch_end(self, trainer, raw_batch, parsed_batch, probs) -> None:
        import tensorflow as tf  # pylint: disable=g-import-not-at-top
        labels = np.asarray(parsed_batch.labels).reshape(-1)
        if self.frozen is not None:
            self.frozen_scores.append(np.asarray(self.frozen.score(parsed_batch.features)).reshape(-1))
        self.labels.append(labels)
        self.scores.append(np.asarray(probs).reshape(-1))
        self.seen += len(labels)
        if self.frozen is None and self.seen >= self.half:
            path = tf.train.Checkpoint(model=trainer.model).write(os.path.join(self.frozen_dir, "frozen"))
            self.frozen = CheckpointModel(trainer.config)
            self.frozen.restore(path)
            self.frozen_at = self.seen
        if self.seen >= self.total:
            trainer.stop("the whole stream was trained")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="directory with stream.csv, or MovieLens's u.data and u.item")
    parser.add_argument("--config", default=os.path.join(ROOT, "samples", "movielens.config"))
    parser.add_argument("--edit_config_json", default="{}", help="overrides of the config, as for easyonline.train")
    parser.add_argument("--png", default="", help="where to write the windowed AUC plot ('' : none)")
    parser.add_argument("--window", type=int, default=5000, help="samples per point of the plot")
    parser.add_argument("--assert_targets", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    lines = read_stream(args.data)
    n = len(lines)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="learning_quality_") as work:
        recorder = Recorder(n // 2, n, os.path.join(work, "frozen"))
        train_online(args.config, lines, work, json.loads(args.edit_config_json), recorder)
    train_secs = time.time() - started
    labels, scores = np.concatenate(recorder.labels), np.concatenate(recorder.scores)
    frozen = np.concatenate(recorder.frozen_scores)
    half = recorder.frozen_at
    assert len(labels) == n and half is not None and len(frozen) == n - half, (len(labels), n, half, len(frozen))
    lr_scores = OnlineLogisticRegression().run(lines)
    lr_labels = np.array([int(line.split(b",", 1)[0]) for line in lines])
    assert np.array_equal(lr_labels, labels), "the trainer saw the stream in another order than it was written"
    result = {
        "samples": n, "half": half, "train_secs": round(train_secs, 1),
        "easyonline": {"overall": auc(labels, scores), "second_half": auc(labels[half:], scores[half:])},
        "easyonline_frozen": {"second_half": auc(labels[half:], frozen)},
        "online_lr": {"overall": auc(labels, lr_scores), "second_half": auc(labels[half:], lr_scores[half:])},
    }
    second = result["easyonline"]["second_half"]
    result["targets"] = {
        "second_half >= 0.78": second >= 0.78,
        "second_half >= online_lr + 0.02": second >= result["online_lr"]["second_half"] + 0.02,
        "second_half >= frozen + 0.08": second >= result["easyonline_frozen"]["second_half"] + 0.08,
    }
    print(json.dumps(result, indent=1))
    print(f"\n{n} samples, frozen copy taken at {half}; online training took {train_secs:.0f} s")
    print(f"{'':24}{'overall':>10}{'2nd half':>10}")
    print(f"{'easyonline':24}{result['easyonline']['overall']:>10.4f}{second:>10.4f}")
    print(f"{'easyonline frozen':24}{'':>10}{result['easyonline_frozen']['second_half']:>10.4f}")
    print(f"{'online LR (baseline)':24}{result['online_lr']['overall']:>10.4f}"
          f"{result['online_lr']['second_half']:>10.4f}")
    for target, met in result["targets"].items():
        print(f"  {target:36} {'met' if met else 'MISSED'}")
    if args.png:
        step = max(args.window // 5, 1)
        curves = {"easyonline, online": windowed_auc(labels, scores, args.window, step),
                  "easyonline, frozen at the half": windowed_auc(
                      labels, np.concatenate([scores[:half], frozen]), args.window, step, start=half),
                  "online LR (baseline)": windowed_auc(labels, lr_scores, args.window, step)}
        title = f"{os.path.basename(args.config)} on {os.path.basename(args.data.rstrip('/'))}"
        plot_auc_curves(args.png, curves, half, "frozen here", title)
        print(f"plot: {args.png}")
    return 0 if not args.assert_targets or all(result["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
