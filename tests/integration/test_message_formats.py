"""JSON messages and a user parse function: same features as CSV, and the same bad-input accounting."""
import json

import numpy as np
import pytest

from easyonline.config import ConfigError, apply_edit_config_json, parse_pipeline_config
from easyonline.config.validate import validate_pipeline_config
from easyonline.features import CsvParser, build_feature_specs
from easyonline.features.record_parser import make_parser

CONFIG = '''
model_dir: "/tmp/unused"
file_train_input { paths: "unused" }
data_config {
  input_fields { input_name: "label" input_type: INT32 }
  input_fields { input_name: "price" input_type: FLOAT default_val: "2.5" }
  input_fields { input_name: "user" input_type: STRING }
  input_fields { input_name: "item" input_type: INT64 }
  input_fields { input_name: "tags" input_type: STRING }
  label_fields: "label"
}
feature_configs { input_names: "price" feature_type: RawFeature }
feature_configs { input_names: "user" embedding_dim: 4 }
feature_configs { input_names: "item" embedding_dim: 4 }
feature_configs { input_names: "tags" embedding_dim: 4 feature_type: TagFeature separator: "|" }
model_config { model_class: "dnn" }
'''


def _config(**edits):
    config = parse_pipeline_config(CONFIG)
    apply_edit_config_json(config, edits)
    validate_pipeline_config(config)
    return config


def _parse(config, lines):
    return make_parser(build_feature_specs(config), config.data_config).parse(lines)


def test_json_lines_give_the_same_features_as_csv():
    config = _config(**{"data_config.input_format": "JSON"})
    records = [{"label": 1, "price": 0.5, "user": "alice, the first", "item": 7, "tags": ["a", "b"]},
               {"label": 0, "user": "bob", "item": 9, "tags": "c"}]  # price missing: default_val
    batch = _parse(config, [json.dumps(r).encode() for r in records])
    csv = CsvParser(build_feature_specs(_config())).parse_exact([b'1,0.5,"alice, the first",7,a|b', b"0,,bob,9,c"])
    assert batch.size == 2 and not batch.rejected
    for name in ("price", "user", "item"):
        np.testing.assert_array_equal(batch.features[name].numpy(), csv.features[name].numpy())
    np.testing.assert_array_equal(batch.features["tags"].flat_values.numpy(), csv.features["tags"].flat_values.numpy())
    np.testing.assert_array_equal(batch.labels.numpy(), [1.0, 0.0])


def test_json_bad_inputs_are_rejected_with_reasons():
    config = _config(**{"data_config.input_format": "JSON"})
    lines = [b'{"label": 1, "user": "a", "item": 1}', b"not json", b"[1, 2]", b'{"user": "nolabel", "item": 2}',
             b'{"label": 0, "user": "a", "item": "x"}', b'{"label": 0, "user": {"nested": 1}, "item": 3}',
             b'{"label": 0, "user": "b", "item": 4}']
    batch = _parse(config, lines)
    assert batch.size == 2
    assert batch.features["item"].numpy().tolist() == [1, 4]
    reasons = [r for _, r in batch.rejected]
    assert len(reasons) == 5
    assert any("JSONDecodeError" in r for r in reasons)
    assert any("expected a JSON object" in r for r in reasons)
    assert any("label field 'label' is missing" in r for r in reasons)
    assert any("int64" in r for r in reasons)
    assert any("holds a dict" in r for r in reasons)


def test_user_parse_function_and_its_bad_inputs():
    config = _config(**{"data_config.input_format": "CUSTOM", "data_config.parse_fn": "tests.user_parse_fn:parse"})
    batch = _parse(config, [b"1|alice|1,2,3", b"0|bob|", b"7|carol|4", b"garbage", b"0|dave|5"])
    assert batch.size == 4  # alice's three items and dave's one; bob has none
    assert batch.features["item"].numpy().tolist() == [1, 2, 3, 5]
    assert len(batch.rejected) == 2
    assert "bad label '7'" in batch.rejected[0][1] and "tests.user_parse_fn:parse" in batch.rejected[0][1]


@pytest.mark.parametrize("parse_fn, message", [
    ("tests.user_parse_fn", "is not 'package.module:function'"),
    ("tests.no_such_module:parse", "cannot import"),
    ("tests.user_parse_fn:NOT_CALLABLE", "has no function"),
])
def test_bad_parse_fn_names_the_field(parse_fn, message):
    with pytest.raises(ConfigError) as e:
        _config(**{"data_config.input_format": "CUSTOM", "data_config.parse_fn": parse_fn})
    assert e.value.path == "data_config.parse_fn" and message in str(e.value)


def test_json_messages_train_from_kafka(broker, topic, tmp_path):
    from kafka import KafkaProducer
    from easyonline.tools.stream_producer import SyntheticCtrStream, input_field_names
    from easyonline.jobs.online_train import build_trainer
    from tests.conftest import online_config
    broker.create_topic(topic, 1)
    names = input_field_names()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    lines = SyntheticCtrStream().lines(0, 3000)
    for i in range(0, 3000, 3):  # three newline-delimited JSON objects per message
        objects = [json.dumps(dict(zip(names, l.decode().split(",")))) for l in lines[i:i + 3]]
        producer.send(topic, "\n".join(objects).encode(), partition=0)
    producer.send(topic, b'{"label": 1, "I1": "oops"}', partition=0)
    producer.flush()
    config = online_config(tmp_path / "m", broker.bootstrap, topic, **{"data_config.input_format": "JSON",
                                                                          "data_config.batch_size": 300})
    summary = build_trainer(config, online=False).run()
    assert summary.samples == 3000 and summary.rejected == 1
    assert summary.positions == {0: 1001}
