"""What ``python -m easyonline.predict`` does once its flags are parsed (jobs/predict_cli.py): scores a stream."""
import os

from absl import flags

from easyonline.checkpoint.checkpointer import latest_checkpoint
from easyonline.config.kafka_settings import consumer_settings_from_flags, extra_consumer_config, security_settings
from easyonline.config.secrets import REDACTED
from easyonline.core.stop_signal import StopSignal
from easyonline.export.layout import ASSETS_DIR, PIPELINE_FILE, newest_version
from easyonline.features import build_feature_specs
from easyonline.features.record_parser import make_parser
from easyonline.inputs import FileInput, KafkaInput
from easyonline.inputs.bad_input import BadInputMonitor
from easyonline.jobs.config_flags import config_from_flags
from easyonline.predict import predictor
from easyonline.predict.sinks import FileSink, PredictionSink, TopicSink
from easyonline.protos import pipeline_pb2
from easyonline.scoring.passes import parsed_batches


def predict(FLAGS: flags.FlagValues) -> int:  # pylint: disable=invalid-name
    """Scores --input_path or --input_topic with --export_dir or a checkpoint into the output; prints a summary."""
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
