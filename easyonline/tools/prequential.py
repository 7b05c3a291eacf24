"""Trains a config online on a given stream through a local broker, scoring each batch before training on it.

How the quality benches (tools/bench/*_quality.py) judge a config on a real, time-ordered stream (MovieLens's
ratings, say), and how a user can judge theirs: the lines go through a local broker (one partition: the
order is kept), the trainer runs online with no checkpoint nor publishing, and a callback records what it
predicted (``easyonline.scoring.prequential.TaskRecorder``).
"""
import argparse
import os
import tempfile
from typing import Any, Dict, List

from easyonline.config import apply_edit_config_json, load_pipeline_config
from easyonline.core.callbacks import Callback
from easyonline.jobs.online_train import build_trainer
from easyonline.scoring.prequential import TaskRecorder
from easyonline.tools.local_broker import LocalBroker
from easyonline.tools.sample_configs import sample_config as sample_config_path
from easyonline.tools.stream_producer import produce


def train_online(config_path: str, lines: List[bytes], work: str, edits: Dict[str, Any], recorder: Callback) -> None:
    """Streams ``lines`` through a local broker (one partition, under ``work``) and trains ``config_path`` (with
    ``edits``, as easyonline.train's --edit_config_json) on them online, no checkpoints nor publishing, with
    ``recorder`` as a callback: it must stop the trainer at the stream's end (``TaskRecorder`` does)."""
    with LocalBroker(log_path=os.path.join(work, "broker.log")) as broker:
        broker.create_topic("stream", 1)
        produce(broker.bootstrap, "stream", [lines], partitions=1)
        config = load_pipeline_config(config_path)
        apply_edit_config_json(config, dict({
            "model_dir": os.path.join(work, "model"), "kafka_train_input.server": broker.bootstrap,
            "kafka_train_input.topic": "stream", "kafka_train_input.group": "prequential",
            "train_config.save_checkpoints_secs": 0, "train_config.save_checkpoints_steps": 0}, **edits))
        config.train_config.ClearField("incr_save_config")
        build_trainer(config, online=True, callbacks=[recorder]).run()


def train_prequential(config_path: str, lines: List[bytes], edits: Dict[str, Any]) -> TaskRecorder:
    """``train_online`` in a temporary directory, recorded by a ``TaskRecorder`` of the whole stream."""
    with tempfile.TemporaryDirectory(prefix="prequential_") as work:
        recorder = TaskRecorder(len(lines))
        train_online(config_path, lines, work, edits, recorder)
    return recorder


def comparison_arguments(parser: argparse.ArgumentParser, sample_config: str, plot: str) -> None:
    """The flags of a bench comparing ``--config`` (default samples/<sample_config>) with the single-task
    samples/movielens.config in one run: config overrides, --skip_single, --seeds, --png (``plot``),
    --window, --assert_targets: the flags of tools/bench/multitask_quality.py and sequence_quality.py."""
    parser.add_argument("--config", default=sample_config_path(sample_config))
    parser.add_argument("--single_config", default=sample_config_path("movielens.config"))
    parser.add_argument("--edit_config_json", default="{}", help="overrides of --config, as for easyonline.train")
    parser.add_argument("--single_edit_config_json", default="{}", help="overrides of --single_config, as above")
    parser.add_argument("--skip_single", action="store_true",
                        help="do not train --single_config (for tuning: its AUC and the AUC target are then absent)")
    parser.add_argument("--seeds", type=int, default=1,
                        help="train both models with N seeds (train_config.seed = the config's, its + 1, ...); "
                             "the figures and the targets are then the means over the seeds")
    parser.add_argument("--png", default="", help=f"where to write {plot} ('' : none)")
    parser.add_argument("--window", type=int, default=5000, help="samples per point of the plot")
    parser.add_argument("--assert_targets", action="store_true", help="exit 1 when a target is missed")


def parse_comparison_arguments(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The parsed flags; --seeds below 1 is refused."""
    args = parser.parse_args()
    if args.seeds < 1:
        raise SystemExit(f"--seeds must be >= 1, got {args.seeds}")
    return args
