"""``python -m easyonline.train --config online.config --online``: the trainer's command line.

Exit codes: 0 after a clean stop (input ended, num_steps, stop file, SIGTERM),
2 for a bad config, 3 when the broker or an input file cannot be reached, 4 when more of
the stream was malformed than data_config.max_bad_fraction allows.
"""
import sys

from absl import flags

from easyonline.config.command_flags import config_from_flags, define_config_flags
from easyonline.utils.cli import run_command
from easyonline.utils.logs import setup_logging


def define_flags() -> None:
    """Defined on demand, so importing this module never clashes with other commands' flags."""
    define_config_flags()
    flags.DEFINE_bool("online", False, "Train from kafka_train_input until stopped (stop file, SIGTERM, SIGINT). "
                      "Without it, train until the input ends (files; or Kafka caught up) or num_steps.")


def main(argv) -> int:
    del argv
    FLAGS = flags.FLAGS
    setup_logging(FLAGS.log_level)
    from easyonline.config import ConfigError  # pylint: disable=g-import-not-at-top
    try:
        config = config_from_flags(online=FLAGS.online)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from easyonline.train.threading_config import apply_thread_config  # pylint: disable=g-import-not-at-top
    apply_thread_config(config.train_config)
    from easyonline.inputs.kafka_client import BrokerUnreachableError  # pylint: disable=g-import-not-at-top
    from easyonline.train.bad_input import BadInputError  # pylint: disable=g-import-not-at-top
    from easyonline.train.trainer import OnlineTrainer  # pylint: disable=g-import-not-at-top
    try:
        trainer = OnlineTrainer(config, online=FLAGS.online)
        summary = trainer.run()
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (BrokerUnreachableError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    except BadInputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 4
    print("training summary")
    for line in summary.lines():
        print("  " + line)
    return 0


def run() -> None:
    run_command(define_flags, main)
