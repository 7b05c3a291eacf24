"""``python -m easyonline.predict``: scores a file or a topic with an export or a checkpoint.

Input lines are parsed with the config's data_config (CSV, JSON or a parse
function), the same as training; bad lines are counted and skipped. Output:
one line (file) or message (topic) per sample, ``<prediction>\\t<sample>``: one
prediction column per task, in task order (``probs`` of one binary task, ``y``
of a regression, ``probs_<tower>`` / ``y_<tower>`` per tower of a multi-task
model; the summary line names them, and ``--output_header`` writes them as a
file's first line).
"""
import os
import sys

from absl import flags

from easyonline.checkpoint.checkpointer import latest_checkpoint
from easyonline.config.kafka_settings import consumer_settings_from_flags, extra_consumer_config, security_settings
from easyonline.config.secrets import REDACTED
from easyonline.core.exit_codes import run_job
from easyonline.core.stop_signal import StopSignal
from easyonline.export.layout import ASSETS_DIR, PIPELINE_FILE, newest_version
from easyonline.features import build_feature_specs
from easyonline.features.record_parser import make_parser
from easyonline.inputs import FileInput, KafkaInput
from easyonline.inputs.bad_input import BadInputMonitor
from easyonline.jobs.config_flags import config_from_flags, define_config_flags
from easyonline.predict import predictor
from easyonline.predict.sinks import FileSink, PredictionSink, TopicSink
from easyonline.protos import pipeline_pb2
from easyonline.scoring.passes import parsed_batches
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
    FLAGS = flags.FLAGS
    if FLAGS.export_dir and not FLAGS.config:
        FLAGS.config = os.path.join(newest_version(FLAGS.export_dir), ASSETS_DIR, PIPELINE_FILE)
    config = config_from_flags(online=False)
    if FLAGS.export_dir:
        score, columns = predictor.export_scorer(FLAGS.export_dir)
    else:
        where = FLAGS.checkpoint_path or config.model_dir
        path = latest_checkpoint(where)
        if path is None:
            raise FileNotFoundError(f"no checkpoint at {where}")
        score, columns = predictor.checkpoint_scorer(config, path)
    data = config.data_config
    server = FLAGS.kafka_server or config.kafka_train_input.server
    # The input's SASL/SSL settings (not its tuning), then the flags': for the input and the output topic.
    consumer_settings_from_flags(FLAGS.kafka_config, "--kafka_config")  # names a bad key or value
    raw = {key: value for key, value in security_settings(dict(config.kafka_train_input.config)).items()
           if value != REDACTED}
    raw.update(pair.split("=", 1) for pair in FLAGS.kafka_config)
    connection = pipeline_pb2.KafkaInput(server=server, topic=FLAGS.input_topic, group="", config=raw)
    if FLAGS.input_topic:
        source = KafkaInput(connection, data.batch_size, data.batch_timeout_ms, path="--input_topic",
                            max_message_bytes=data.max_message_bytes)
    else:
        source = FileInput(FLAGS.input_path.split(","), data.batch_size)
    if FLAGS.output_topic:
        sink: PredictionSink = TopicSink(server, FLAGS.output_topic,
                                         security_settings(extra_consumer_config(connection, "--kafka_config")))
    else:
        sink = FileSink(FLAGS.output_path)
        if FLAGS.output_header:
            sink.write(["\t".join(columns + ["sample"]).encode()])
    bad_input = BadInputMonitor(data)
    stop = StopSignal()
    stop.install_signal_handlers()
    try:
        batches = parsed_batches(source, make_parser(build_feature_specs(config), data), bad_input, FLAGS.max_samples,
                                 follow=FLAGS.follow, should_stop=stop.should_stop)
        summary = predictor.predict(score, batches, sink)
    finally:
        source.close()
        bad_input.close()
    print(f"scored {summary.samples} samples in {summary.seconds:.1f}s, rejected {bad_input.total} "
          f"{ {k: v for k, v in bad_input.counts.items() if v} if bad_input.total else ''}-> {FLAGS.output_topic or FLAGS.output_path} "
          f"(columns: {', '.join(columns)}, sample)")
    return 0


def run() -> None:
    run_command(define_flags, main)
