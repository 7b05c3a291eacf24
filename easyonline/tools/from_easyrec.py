"""Converts an EasyRec ODL config to this project's form: ``python -m easyonline.tools.from_easyrec IN OUT``.

Not needed to run one: ``easyonline.train --pipeline_config_path easyrec.config`` reads EasyRec's forms as
they are (docs/easyrec.md). The converter writes what they are read as, for a config to maintain from then
on: ``feature_config { features }`` as ``feature_configs``, ``learning_rate { ... }`` messages as
``learning_rate_schedule``, librdkafka ``config_global`` strings as kafka-python settings, the older
``offset``/``partitions`` as ``offset_info``; settings that mean nothing here are dropped and listed in the
output's first lines. Exit codes: 0 written, 2 the config is invalid (the message names the field).
"""
import sys
from typing import List, Tuple

from absl import flags
from google.protobuf import text_format

from easyonline.config.easyrec_compat import normalize
from easyonline.config.loader import parse_pipeline_config
from easyonline.core.errors import ConfigError
from easyonline.utils import fileio
from easyonline.utils.cli import run_command

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_bool("validate", True, "Check the converted config as the trainer would (a bad field exits 2).")


def convert(text_in: str, source: str = "<string>", validate: bool = True) -> Tuple[str, List[str]]:
    """(the converted config's text, the EasyRec settings dropped); a bad config raises ConfigError."""
    config = parse_pipeline_config(text_in, source)
    dropped = normalize(config)
    if validate:
        # why: the validator loads TensorFlow (~5 s of CPU), which --help and --novalidate never need
        from easyonline.config.validate import validate_pipeline_config  # pylint: disable=g-import-not-at-top
        validate_pipeline_config(config)
    header = "".join(f"# dropped (means nothing here): {item}\n" for item in dropped)
    return f"# converted from {source} by easyonline.tools.from_easyrec\n" + header + \
        text_format.MessageToString(config), dropped


def main(argv) -> int:
    if len(argv) != 3:
        print("usage: python -m easyonline.tools.from_easyrec IN OUT", file=sys.stderr)
        return 2
    source, target = argv[1], argv[2]
    try:
        text, dropped = convert(fileio.read_text(source), source, FLAGS.validate)
    except FileNotFoundError:
        print(f"error: {source} does not exist", file=sys.stderr)
        return 2
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    fileio.write_text_atomic(target, text)
    print(f"wrote {target}; {len(dropped)} EasyRec settings dropped" + "".join(f"\n  {d}" for d in dropped))
    return 0


def run() -> None:
    run_command(define_flags, main)


if __name__ == "__main__":
    run()
