"""A predict request for the REST API built from lines of the stream: ``{"instances": [{input: value}, ...]}``.

Each CSV line (in the config's data_config: its separator and input_fields) becomes one instance holding the
inputs the export's ``serving_default`` takes (the raw fields the features read; labels are left out), each in
its input's type. An empty field with a ``default_val`` is left out: the server fills in the default, as
training does for an empty field.

    python -m easyonline.tools.predict_request --config samples/online.config \
        --input_csv /tmp/easyonline/train.csv --rows 2 > /tmp/easyonline/request.json
    curl -s -d @/tmp/easyonline/request.json http://127.0.0.1:8501/v1/models/online:predict
"""
import json
import sys
from typing import Dict, Iterable, List

from absl import flags

from easyonline.config import load_pipeline_config
from easyonline.features.feature_spec import build_feature_specs
from easyonline.utils.cli import run_command

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string("config", None, "The pipeline config the model was trained with (samples/online.config, "
                        "or model_dir/pipeline.config).")
    flags.DEFINE_string("input_csv", "-", "CSV file of samples, as the stream carries them (-: stdin).")
    flags.DEFINE_integer("rows", 1, "Instances in the request: the first this many lines.")
    flags.DEFINE_integer("skip", 0, "Lines to skip first.")


def request_inputs(config) -> Dict[str, str]:
    """{input name: 'string' | 'int' | 'float'}: the inputs of the export's serving_default for ``config``."""
    # why: TensorFlow (the serving module's input specs) is imported only to build a request (--help is instant)
    from easyonline.export.serving_module import raw_input_specs, tf  # pylint: disable=g-import-not-at-top
    specs = raw_input_specs(build_feature_specs(config))
    return {name: "string" if spec.dtype == tf.string else "int" if spec.dtype.is_integer else "float"
            for name, spec in specs.items()}


def build_request(config, lines: Iterable[str]) -> dict:
    """The REST body for ``lines`` (CSV in the config's data_config)."""
    data = config.data_config
    separator = data.separator or ","
    kinds = request_inputs(config)
    fields = list(data.input_fields)
    instances: List[dict] = []
    for line in lines:
        values = line.rstrip("\r\n").split(separator)
        if len(values) != len(fields):
            raise ValueError(f"a line has {len(values)} fields, the config's data_config.input_fields "
                             f"{len(fields)}: {line[:200]!r}")
        row: Dict[str, object] = {}
        for field, value in zip(fields, values):
            kind = kinds.get(field.input_name)
            if kind is None:
                continue
            if value == "" and field.HasField("default_val"):
                continue  # the server fills in the default
            if kind == "string":
                row[field.input_name] = value
            elif kind == "int":
                row[field.input_name] = int(float(value)) if value else 0
            else:
                row[field.input_name] = float(value) if value else 0.0
        instances.append(row)
    return {"instances": instances}


def main(argv) -> int:
    del argv
    if not FLAGS.config:
        print("predict_request: --config is required", file=sys.stderr)
        return 2
    config = load_pipeline_config(FLAGS.config)
    source = sys.stdin if FLAGS.input_csv == "-" else open(FLAGS.input_csv)
    lines = []
    with source:
        for i, line in enumerate(source):
            if i < FLAGS.skip or not line.strip():
                continue
            lines.append(line)
            if len(lines) >= FLAGS.rows:
                break
    if not lines:
        print(f"predict_request: no lines in {FLAGS.input_csv}", file=sys.stderr)
        return 2
    try:
        request = build_request(config, lines)
    except ValueError as e:
        print(f"predict_request: {e}", file=sys.stderr)
        return 2
    print(json.dumps(request))
    return 0


def run() -> None:
    run_command(define_flags, main)


if __name__ == "__main__":
    run()
