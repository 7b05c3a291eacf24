"""``python -m easyonline.predict``: scores a file or a topic with an export or a checkpoint.

Input lines are parsed with the config's data_config (CSV, JSON or a parse
function), the same as training; bad lines are counted and skipped. Output:
one line (file) or message (topic) per sample, ``<prediction>\\t<sample>``: one
prediction column per task, in task order (``probs`` of one binary task, ``y``
of a regression, ``probs_<tower>`` / ``y_<tower>`` per tower of a multi-task
model; the summary line names them, and ``--output_header`` writes them as a
file's first line).
"""
import sys

from absl import flags

from easyonline.core.exit_codes import run_job
from easyonline.jobs.config_flags import define_config_flags
from easyonline.utils.cli import run_command
from easyonline.utils.logs import setup_logging


def define_flags() -> None:
    define_config_flags("Pipeline config (protobuf text): how to parse the input and build the model. Optional "
                        "with --export_dir (the export's assets/pipeline.config is used).",
                        "Overrides model_dir of the config (where --checkpoint_path defaults to).")
    flags.DEFINE_string("export_dir", "", "Score with this export (a version directory, or the directory of "
                        "versions: its newest). Without it, a checkpoint is used.")
    flags.DEFINE_string("checkpoint_path", "", "A checkpoint prefix or a directory (its latest); default: the "
                        "latest checkpoint in model_dir.")
    flags.DEFINE_string("input_path", "", "Comma-separated files or globs to score.")
    flags.DEFINE_string("input_topic", "", "A Kafka topic to score, from its earliest message.")
    flags.DEFINE_string("kafka_server", "", "Brokers of --input_topic and --output_topic (default: the config's "
                        "kafka_train_input.server).")
    flags.DEFINE_bool("follow", False, "With --input_topic: keep scoring new messages until SIGTERM/SIGINT "
                      "instead of stopping at the end of the topic.")
    flags.DEFINE_integer("max_samples", 0, "Score at most this many samples (0: all).")
    flags.DEFINE_string("output_path", "", "Write predictions to this file (local or oss://).")
    flags.DEFINE_string("output_topic", "", "Send predictions to this Kafka topic, one message per sample.")
    flags.DEFINE_bool("output_header", False, "With --output_path: write a first line naming the columns, tab-"
                      "separated (each task's prediction output, e.g. probs_ctr, y_watch, then sample).")
    flags.DEFINE_multi_string("kafka_config", [], "key=value, repeatable: a kafka-python setting for --input_topic "
                              "and --output_topic, e.g. sasl_plain_password=${KAFKA_PASSWORD} (${NAME}: from the "
                              "environment). The SASL/SSL settings of the config's kafka_train_input are used "
                              "already; give the ones an export's pipeline.config redacted.")


def main(argv) -> int:
    del argv
    FLAGS = flags.FLAGS
    setup_logging(FLAGS.log_level)
    if bool(FLAGS.input_path) == bool(FLAGS.input_topic):
        print("error: give exactly one of --input_path and --input_topic", file=sys.stderr)
        return 2
    if bool(FLAGS.output_path) == bool(FLAGS.output_topic):
        print("error: give exactly one of --output_path and --output_topic", file=sys.stderr)
        return 2
    if FLAGS.output_header and not FLAGS.output_path:
        print("error: --output_header needs --output_path (a topic's messages are samples only)", file=sys.stderr)
        return 2
    return run_job(_predict)


def _predict() -> int:
    # why: --help and a bad flag answer without importing TensorFlow (~5 s of CPU)
    from easyonline.jobs.predict_job import predict  # pylint: disable=g-import-not-at-top
    return predict(flags.FLAGS)


def run() -> None:
    run_command(define_flags, main)
