"""Several labels, each checked for its task's kind, and sample weights: parsed by name, bad ones rejected
with their reason (bad_label, bad_weight), the rest of the batch kept."""
import dataclasses

import numpy as np
import pytest

from easyonline.config import parse_pipeline_config
from easyonline.config.validate import validate_pipeline_config
from easyonline.core.errors import ConfigError
from easyonline.core.rejections import rejection_kind
from easyonline.features import CsvParser, build_feature_specs
from easyonline.features.record_parser import make_parser
from easyonline.features.vector_csv import supports
from easyonline.features.label_kinds import label_kinds

CONFIG = '''
model_dir: "/tmp/unused"
file_train_input { paths: "unused" }
data_config {
  input_fields { input_name: "click" input_type: INT32 }
  input_fields { input_name: "rating" input_type: FLOAT }
  input_fields { input_name: "w" input_type: FLOAT default_val: "1" }
  input_fields { input_name: "item" input_type: INT64 }
  label_fields: "click"
  label_fields: "rating"
  sample_weight: "w"
}
feature_configs { input_names: "item" embedding_dim: 4 }
model_config { model_class: "dnn" }
'''


def _config(text=CONFIG):
    config = parse_pipeline_config(text)
    validate_pipeline_config(config)
    return config


def _two_task_specs():
    """click learned by a binary task, rating by a regression task (what a two-tower model's tasks give)."""
    specs = build_feature_specs(_config())
    return dataclasses.replace(specs, label_kinds={"click": "binary", "rating": "regression"})


def test_every_label_and_the_weight_are_parsed_by_name():
    batch = CsvParser(_two_task_specs()).parse([b"1,4.5,2,7", b"0,-0.25,0,8", b"1,3,,9"])
    assert batch.size == 3 and not batch.rejected
    np.testing.assert_allclose(batch.label_dict["click"].numpy(), [1, 0, 1])
    np.testing.assert_allclose(batch.label_dict["rating"].numpy(), [4.5, -0.25, 3])
    # an empty weight takes the field's default_val (1)
    np.testing.assert_allclose(batch.sample_weights.numpy(), [2, 0, 1])
    assert "/sample_weight" not in batch.label_dict


def test_each_label_is_checked_for_its_tasks_kind_and_weights_must_be_finite_and_not_negative():
    lines = [b"1,4.5,1,1",     # kept
             b"2,4.5,1,2",     # click 2: not 0 or 1
             b"0,nan,1,3",     # rating NaN: not finite
             b"0,inf,1,4",     # rating inf
             b"1,-7,-1,5",     # weight -1
             b"0,1e3,nan,6",   # weight NaN
             b"0,0.5,0,7"]     # kept (weight 0 is allowed)
    batch = CsvParser(_two_task_specs()).parse(lines)
    assert batch.size == 2
    assert batch.features["item"].numpy().tolist() == [1, 7]
    np.testing.assert_allclose(batch.label_dict["rating"].numpy(), [4.5, 0.5])
    np.testing.assert_allclose(batch.sample_weights.numpy(), [1, 0])
    kinds = {line: rejection_kind(reason) for line, reason in batch.rejected}
    assert kinds == {b"2,4.5,1,2": "bad_label", b"0,nan,1,3": "bad_label", b"0,inf,1,4": "bad_label",
                     b"1,-7,-1,5": "bad_weight", b"0,1e3,nan,6": "bad_weight"}
    reasons = dict(batch.rejected)
    assert reasons[b"2,4.5,1,2"] == "bad_label: label click 2 is not 0 or 1"
    assert reasons[b"0,inf,1,4"] == "bad_label: label rating inf is not a finite number"
    assert reasons[b"1,-7,-1,5"] == "bad_weight: sample_weight w -1 is not a finite number >= 0"


def test_a_regression_label_may_be_any_finite_number_a_binary_one_not():
    specs = _two_task_specs()
    binary_rating = dataclasses.replace(specs, label_kinds={"click": "binary", "rating": "binary"})
    line = [b"1,4.5,1,1"]
    assert CsvParser(specs).parse(line).size == 1
    assert rejection_kind(CsvParser(binary_rating).parse(line).rejected[0][1]) == "bad_label"


def test_json_records_carry_labels_and_weights_and_are_checked_alike():
    config = _config(CONFIG.replace('sample_weight: "w"', 'sample_weight: "w"\n  input_format: JSON'))
    specs = dataclasses.replace(build_feature_specs(config), label_kinds={"click": "binary", "rating": "regression"})
    parser = make_parser(specs, config.data_config)
    batch = parser.parse([b'{"click": 1, "rating": 2.5, "w": 3, "item": 1}',
                          b'{"click": 0, "rating": 1, "w": -2, "item": 2}'])
    assert batch.size == 1
    np.testing.assert_allclose(batch.sample_weights.numpy(), [3])
    np.testing.assert_allclose(batch.label_dict["rating"].numpy(), [2.5])
    assert [rejection_kind(r) for _, r in batch.rejected] == ["bad_weight"]


def test_label_kinds_come_from_the_models_tasks():
    assert label_kinds(_config()) == {"click": "binary"}  # a single task learns from the first label
    regression = _config(CONFIG.replace('model_class: "dnn"', 'model_class: "dnn" loss_type: L2_LOSS'))
    assert label_kinds(regression) == {"click": "regression"}
    specs = build_feature_specs(regression)
    assert specs.label_kinds == {"click": "regression"} and specs.sample_weight == "w"
    # no task learns from rating: it is not checked (a 0/1 rule would reject good samples)
    assert CsvParser(build_feature_specs(_config())).parse([b"1,4.5,1,1"]).size == 1


def test_the_array_path_takes_weights_regression_labels_and_a_second_tasks_label():
    """The reader process's arrays carry every label field and the weight (vector_csv.py); CsvParser's label
    checks are the array parser's too (tests/integration/test_vector_csv.py)."""
    config = _config()
    assert supports(build_feature_specs(config), config.data_config)  # a sample weight
    regression = _config(CONFIG.replace('model_class: "dnn"', 'model_class: "dnn" loss_type: L2_LOSS'))
    assert supports(build_feature_specs(regression), regression.data_config)
    two_tasks = _config(CONFIG.replace('model_class: "dnn"', """
    model_class: "MMoE"
    mmoe { expert_dnn { hidden_units: [4] } num_expert: 2
           task_towers { tower_name: "click" label_name: "click" }
           task_towers { tower_name: "rating" label_name: "rating" loss_type: L2_LOSS } }"""))
    specs = build_feature_specs(two_tasks)
    assert specs.label_kinds == {"click": "binary", "rating": "regression"}
    assert supports(specs, two_tasks.data_config)
    json = _config(CONFIG.replace('sample_weight: "w"', 'sample_weight: "w"\n  input_format: JSON'))
    assert not supports(build_feature_specs(json), json.data_config)  # other formats: CsvParser's kin


@pytest.mark.parametrize("weight, message", [("nope", "'nope' is not an input field"),
                                             ("item", None)])
def test_sample_weight_must_name_a_numeric_input_field(weight, message):
    text = CONFIG.replace('sample_weight: "w"', f'sample_weight: "{weight}"')
    if message is None:
        _config(text)
        return
    with pytest.raises(ConfigError) as e:
        _config(text)
    assert e.value.path == "data_config.sample_weight" and message in str(e.value)


def test_a_string_sample_weight_field_is_a_config_error():
    text = CONFIG.replace('input_name: "w" input_type: FLOAT default_val: "1"', 'input_name: "w" input_type: STRING')
    with pytest.raises(ConfigError) as e:
        _config(text)
    assert e.value.path == "data_config.sample_weight" and "is a STRING field" in str(e.value)
