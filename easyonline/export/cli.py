"""``python -m easyonline.export --config X --export_dir D``: a SavedModel for serving.

Exit codes: 0 exported, 2 bad config or flags, 3 no checkpoint or update stream unreachable.
"""
import sys

from absl import flags

from easyonline.utils.cli import run_command

from easyonline.utils.logs import setup_logging


def define_flags() -> None:
    flags.DEFINE_string("config", None, "Pipeline config (protobuf text); model_dir/pipeline.config works.")
    flags.DEFINE_string("export_dir", None, "Directory of versions: the export is written to <export_dir>/<unix time>.")
    flags.DEFINE_string("checkpoint_path", "", "A checkpoint prefix or a directory (its latest); default: the "
                        "latest checkpoint in model_dir.")
    flags.DEFINE_string("model_dir", "", "Overrides model_dir of the config (where the parameter id maps are).")
    flags.DEFINE_string("edit_config_json", "", "JSON object of config overrides, as for easyonline.train.")
    flags.DEFINE_string("log_level", "INFO", "Python log level: DEBUG, INFO, WARNING, ERROR.")


def main(argv) -> int:
    del argv
    FLAGS = flags.FLAGS
    setup_logging(FLAGS.log_level)
    from easyonline.config import ConfigError, load_pipeline_config, validate_pipeline_config  # pylint: disable=g-import-not-at-top
    if not FLAGS.config or not FLAGS.export_dir:
        print("error: --config and --export_dir are required", file=sys.stderr)
        return 2
    try:
        config = load_pipeline_config(FLAGS.config, FLAGS.edit_config_json)
        if FLAGS.model_dir:
            config.model_dir = FLAGS.model_dir
        validate_pipeline_config(config, online=False)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from kafka.errors import KafkaError  # pylint: disable=g-import-not-at-top
    from easyonline.export.exporter import export_saved_model  # pylint: disable=g-import-not-at-top
    try:
        path = export_saved_model(config, FLAGS.export_dir, FLAGS.checkpoint_path or None)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    except KafkaError as e:
        print(f"error: cannot read the update stream to find where this export starts: {e}", file=sys.stderr)
        return 3
    print(path)
    return 0


def run() -> None:
    run_command(define_flags, main)
