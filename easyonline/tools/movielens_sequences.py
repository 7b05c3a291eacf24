"""Builds samples/movielens_din.config's input: each rating as a sample line with its behaviour sequences.

    python -m easyonline.tools.movielens_sequences --movielens_dir ml-100k --output_path din.csv
    python -m easyonline.tools.movielens_sequences --input_path events.csv --output_path din.csv
    python -m easyonline.tools.movielens_sequences --kafka_server 127.0.0.1:9092 \\
        --input_topic ratings --output_topic din_samples

Input, one of: MovieLens 100K's ``u.data`` and ``u.item`` (--movielens_dir), or a time-ordered stream of
rating events, one a line ``<unix seconds>,<user>,<movie>,<rating>,<genres joined by |>`` (e.g.
``881250949,196,242,3,Comedy``), from a file (--input_path) or a Kafka topic read from its start to its end as
it stands (--input_topic; one partition keeps the order). Output, one of a file (--output_path) or a topic
(--output_topic, one message a sample, in the input's order): lines of the config's input fields, in its
order: ``label,user,movie,genres,hour,weekday`` (label: rating >= 4; hour and weekday in UTC) followed by its
sequences, each from events strictly before the sample's own time (an event of the same second is not yet
history), the most recent (or most alike) first, as many as the SequenceFeature reading it keeps
(easyonline/movielens/sequences.py). Serving must be given the same sequences, built from the events before
the request: docs/config_reference.md, "Building a sequence upstream".
"""
import os
import time
from typing import List

from absl import flags

from easyonline.config.kafka_settings import consumer_settings_from_flags, security_settings
from easyonline.core.errors import ConfigError
from easyonline.core.exit_codes import run_job
from easyonline.inputs.kafka_input import KafkaInput
from easyonline.movielens import ratings as movielens
from easyonline.movielens import sequences
from easyonline.predict.sinks import TopicSink
from easyonline.protos import pipeline_pb2
from easyonline.tools.sample_configs import sample_config
from easyonline.utils.cli import run_command

FLAGS = flags.FLAGS
IDLE_TIMEOUT_SECS = 120.0  # an input topic that neither delivers nor can say it is at its end (no broker)


def define_flags() -> None:
    """Defined on demand, so importing this module never clashes with other commands' flags."""
    flags.DEFINE_string("config", "", "The pipeline config whose input fields the lines carry (its fields after "
                        "label,user,movie,genres,hour,weekday must be sequences the module builds). Default: the "
                        "sample movielens_din.config (the checkout's samples/, else the installed copy).")
    flags.DEFINE_string("movielens_dir", "", "A directory with MovieLens 100K's u.data and u.item.")
    flags.DEFINE_string("input_path", "", "A file of rating events in time order, one a line: "
                        "time,user,movie,rating,genres.")
    flags.DEFINE_string("input_topic", "", "A Kafka topic of rating events (as --input_path's lines; a message may "
                        "hold several), read from its earliest message to its end as it stands.")
    flags.DEFINE_string("output_path", "", "Write the sample lines to this file.")
    flags.DEFINE_string("output_topic", "", "Send the sample lines to this Kafka topic, one message a sample (the "
                        "topic is not created here).")
    flags.DEFINE_string("kafka_server", "", "Brokers of --input_topic and --output_topic (host:port, "
                        "comma-separated).")
    flags.DEFINE_multi_string("kafka_config", [], "key=value, repeatable: a kafka-python setting for both topics, "
                              "e.g. security_protocol=SASL_SSL (${NAME}: from the environment).")
    flags.DEFINE_integer("sequence_length", 0, "Events per sequence, at most, for every sequence; 0: for each, "
                         "the sequence_length of the config's SequenceFeature reading it (the longest, when several "
                         "do; 20 when none does).")


def read_topic_lines(server: str, topic: str, settings: dict) -> List[bytes]:
    """Every line of ``topic`` from its earliest message to its end as it stands (messages split at newlines)."""
    connection = pipeline_pb2.KafkaInput(server=server, topic=topic, group="", config=settings)
    source = KafkaInput(connection, 10000, 200, path="--input_topic")
    lines: List[bytes] = []
    idle_since = time.time()
    try:
        while True:
            raw = source.next_batch(timeout=0.5)
            if raw is None:
                if source.exhausted or source.idle_lag == 0:
                    return lines
                if time.time() - idle_since > IDLE_TIMEOUT_SECS:
                    raise TimeoutError(f"--input_topic {topic}: nothing delivered for {IDLE_TIMEOUT_SECS:.0f}s and "
                                       "its end is unknown (is the broker reachable?)")
                continue
            idle_since = time.time()
            lines.extend(raw.lines)
    finally:
        source.close()


def _checked_flags() -> None:
    inputs = [name for name in ("movielens_dir", "input_path", "input_topic") if getattr(FLAGS, name)]
    if len(inputs) != 1:
        raise ConfigError("", f"give exactly one of --movielens_dir, --input_path and --input_topic (got "
                              f"{', '.join('--' + n for n in inputs) or 'none'})")
    if bool(FLAGS.output_path) == bool(FLAGS.output_topic):
        raise ConfigError("", "give exactly one of --output_path and --output_topic")
    if (FLAGS.input_topic or FLAGS.output_topic) and not FLAGS.kafka_server:
        raise ConfigError("", "--input_topic and --output_topic need --kafka_server")
    if FLAGS.sequence_length < 0:
        raise ConfigError("", f"--sequence_length must be >= 0, got {FLAGS.sequence_length}")


def build() -> int:
    """Reads the input, builds the lines, writes them; raises the errors ``run_job`` turns into exit codes."""
    _checked_flags()
    config = FLAGS.config or sample_config("movielens_din.config")
    if not os.path.isfile(config):
        raise ConfigError("", f"--config {config}: no such file")
    names = sequences.config_sequences(config)
    lengths = FLAGS.sequence_length or sequences.config_lengths(config, names)
    consumer_settings_from_flags(FLAGS.kafka_config, "--kafka_config")  # names a bad key or value
    settings = dict(pair.split("=", 1) for pair in FLAGS.kafka_config)
    if FLAGS.movielens_dir:
        ratings = movielens.read_movielens(FLAGS.movielens_dir)
    elif FLAGS.input_path:
        if not os.path.isfile(FLAGS.input_path):
            raise FileNotFoundError(f"--input_path {FLAGS.input_path}: no such file")
        with open(FLAGS.input_path, "rb") as f:
            ratings = movielens.parse_events(f, f"--input_path {FLAGS.input_path}")
    else:
        ratings = movielens.parse_events(read_topic_lines(FLAGS.kafka_server, FLAGS.input_topic, settings),
                                         f"--input_topic {FLAGS.input_topic}")
    lines = sequences.sample_lines(ratings, lengths, names)
    if FLAGS.output_path:
        with open(FLAGS.output_path, "wb") as f:
            f.writelines(line + b"\n" for line in lines)
    else:
        sink = TopicSink(FLAGS.kafka_server, FLAGS.output_topic,
                         security_settings(consumer_settings_from_flags(FLAGS.kafka_config, "--kafka_config")))
        try:
            sink.write(lines)
        finally:
            sink.close()
    print(f"wrote {len(lines)} samples ({','.join(movielens.SINGLE_TASK_FIELDS + tuple(names))}) to "
          f"{FLAGS.output_path or 'topic ' + FLAGS.output_topic}")
    return 0


def main(argv) -> int:
    del argv
    return run_job(build)


def run() -> None:
    run_command(define_flags, main)


if __name__ == "__main__":
    run()
