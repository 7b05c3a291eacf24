"""``python -m easyonline.train --config online.config --online``: the trainer's command line.

With TF_CONFIG set, runs this process's role of a parameter-server cluster: a ``ps``
serves until stopped; the ``chief`` and every ``worker`` train their share of the
partitions (docs/distributed.md).
"""
import logging
import os
import sys

from absl import flags

from easyonline.core.exit_codes import run_job
from easyonline.jobs.config_flags import define_config_flags
from easyonline.utils.cli import run_command
from easyonline.utils.logs import setup_logging


def define_flags() -> None:
    """Defined on demand, so importing this module never clashes with other commands' flags."""
    define_config_flags()
    flags.DEFINE_bool("online", False, "Train from kafka_train_input until stopped (stop file, SIGTERM, SIGINT). "
                      "Without it, train until the input ends (files; or Kafka caught up) or num_steps.")
    flags.DEFINE_integer("metrics_port", 0, "Serve the status line's figures for Prometheus on "
                         "http://<metrics_host>:<port>/metrics while training (0: off). See docs/operations.md.")
    flags.DEFINE_string("metrics_host", "127.0.0.1", "Address --metrics_port listens on (0.0.0.0: every interface).")
    flags.DEFINE_bool("record_step_spans", False, "Write each step's start and end time to <model_dir>/train/"
                      "step_spans.npy (a cluster's other trainers: train_worker<i>/) when training ends: whether "
                      "the trainers step at the same time, and how much of its time one waits for input "
                      "(tools/bench/cluster_throughput.py reads them). Local model_dir only.")
    flags.DEFINE_bool("continue_train", True, "Accepted for EasyRec's command lines: the trainer always resumes from "
                      "model_dir's latest checkpoint (parameters, optimizer slots, step and Kafka positions). To "
                      "start over, use a new model_dir.")


def main(argv) -> int:
    del argv
    FLAGS = flags.FLAGS
    setup_logging(FLAGS.log_level)
    if not FLAGS.continue_train:
        logging.getLogger("easyonline.train").warning(
            "--continue_train=false is ignored: the trainer always resumes from model_dir's latest checkpoint; "
            "use a new model_dir to start over")
    code = run_job(_train)
    if os.environ.get("TF_CONFIG", "").strip():
        # A cluster task: TensorFlow's gRPC server threads keep reconnecting to lost tasks and can hold
        # the interpreter's exit forever; everything is saved and printed by now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # pylint: disable=protected-access
    return code


def _train() -> int:
    # why: --help and a bad flag answer without importing TensorFlow (~5 s of CPU)
    from easyonline.jobs.train_job import train  # pylint: disable=g-import-not-at-top
    return train(flags.FLAGS)


def run() -> None:
    run_command(define_flags, main)
