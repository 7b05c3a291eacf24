"""The config flags every config-driven command shares, and the one way to turn them into a config.

``--config``, ``--edit_config_json``, ``--model_dir`` and ``--log_level`` mean
the same for train, export and the tools; a bad value is a ConfigError
(exit code 2 in every command).
"""
from typing import Optional

from absl import flags

from easyonline.config.loader import load_pipeline_config
from easyonline.core.errors import ConfigError
from easyonline.protos import pipeline_pb2


def define_config_flags(config_help: str = "Path of the pipeline config (protobuf text format).",
                        model_dir_help: str = "Overrides model_dir of the config.") -> None:
    flags.DEFINE_string("config", None, config_help)
    flags.DEFINE_alias("pipeline_config_path", "config")  # EasyRec's name of the same flag
    flags.DEFINE_string("edit_config_json", "", "JSON object of config overrides, EasyRec-style: "
                        "'{\"train_config.num_steps\": 100, \"kafka_train_input.offset_info\": \"{\\\"0\\\": 5}\"}'.")
    flags.DEFINE_string("model_dir", "", model_dir_help)
    flags.DEFINE_string("log_level", "INFO", "Python log level: DEBUG, INFO, WARNING, ERROR.")


def config_from_flags(online: bool = False, flag_values: Optional[flags.FlagValues] = None
                      ) -> pipeline_pb2.PipelineConfig:
    """Loads --config, applies --edit_config_json and --model_dir, validates; raises ConfigError."""
    values = flag_values or flags.FLAGS
    if not values.config:
        raise ConfigError("", "--config is required")
    config = load_pipeline_config(values.config, values.edit_config_json)
    if values.model_dir:
        config.model_dir = values.model_dir
    # why: validation builds the tasks' losses (TensorFlow); a command's --help needs only define_config_flags
    from easyonline.config.validate import validate_pipeline_config  # pylint: disable=g-import-not-at-top
    validate_pipeline_config(config, online=online)
    return config
