"""Vector raw features (EasyRec's raw_input_dim): parsed to [B, dim], bad samples rejected with their reason
(the rest of the batch kept), the same values in the export's parsing, scaled column by column in the model."""
import numpy as np
import pytest

from easyonline.config import parse_pipeline_config
from easyonline.config.validate import validate_pipeline_config
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.rejections import rejection_kind
from easyonline.export.serving_module import ServingModule, raw_input_specs
from easyonline.features import CsvParser, build_feature_specs
from easyonline.features.raw_vectors import checked_vectors
from easyonline.features.record_parser import make_parser
from easyonline.features.signature import empty_features, feature_signature
from easyonline.features.vector_csv import supports
from easyonline.models.builder import build_model

tf = ensure_legacy_keras()

CONFIG = '''
model_dir: "/tmp/unused"
file_train_input {{ paths: "unused" }}
data_config {{
  input_fields {{ input_name: "label" input_type: INT32 }}
  input_fields {{ input_name: "user" input_type: STRING }}
  input_fields {{ input_name: "vec" input_type: STRING {default} }}
  input_fields {{ input_name: "price" input_type: FLOAT }}
  label_fields: "label"
  {data}
}}
feature_configs {{ input_names: "user" embedding_dim: 4 }}
feature_configs {{ input_names: "vec" feature_type: RawFeature raw_input_dim: 3 {vec} }}
feature_configs {{ input_names: "price" feature_type: RawFeature }}
model_config {{ model_class: "dnn" }}
'''


def _config(default="", data="", vec=""):
    config = parse_pipeline_config(CONFIG.format(default=default, data=data, vec=vec))
    validate_pipeline_config(config)
    return config


def test_a_vector_is_parsed_to_dim_columns_and_an_empty_value_is_zeros_or_the_default():
    batch = CsvParser(build_feature_specs(_config())).parse([b"1,a,0.5|-2|3e-1,7", b"0,b,,8", b"1,c, 1 |2|.5 ,9"])
    assert batch.size == 3 and not batch.rejected
    np.testing.assert_allclose(batch.features["vec"].numpy(), [[0.5, -2, 0.3], [0, 0, 0], [1, 2, 0.5]], rtol=1e-6)
    np.testing.assert_allclose(batch.features["price"].numpy(), [7, 8, 9])
    defaulted = CsvParser(build_feature_specs(_config(default='default_val: "1|2|3"'))).parse([b"0,b,,8"])
    np.testing.assert_allclose(defaulted.features["vec"].numpy(), [[1, 2, 3]])


def test_a_wrong_count_or_a_token_not_a_finite_number_rejects_that_sample_only_with_its_reason():
    lines = [b"1,a,1|2|3,1", b"0,b,1|2,2", b"1,c,1|2|3|4,3", b"0,d,1|abc|3,4", b"1,e,1|nan|3,5", b"0,f,1|1e40|3,6",
             b"1,g,1||3,7", b"0,h,4|5|6,8"]
    batch = CsvParser(build_feature_specs(_config())).parse(lines)
    assert batch.size == 2 and batch.lines == [lines[0], lines[-1]]
    np.testing.assert_allclose(batch.features["vec"].numpy(), [[1, 2, 3], [4, 5, 6]])
    np.testing.assert_allclose(batch.labels.numpy(), [1, 0])
    assert dict(batch.rejected) == {
        lines[1]: "bad_value: raw feature vec: 2 numbers, raw_input_dim is 3 (joined by '|')",
        lines[2]: "bad_value: raw feature vec: 4 numbers, raw_input_dim is 3 (joined by '|')",
        lines[3]: "bad_value: raw feature vec: 'abc' is not a finite number",
        lines[4]: "bad_value: raw feature vec: 'nan' is not a finite number",
        lines[5]: "bad_value: raw feature vec: '1e40' is not a finite number",
        lines[6]: "bad_value: raw feature vec: '' is not a finite number"}
    assert {rejection_kind(r) for _, r in batch.rejected} == {"bad_value"}


def test_json_lists_are_joined_by_the_features_separator():
    config = _config(data="input_format: JSON", vec='separator: ";"')
    parser = make_parser(build_feature_specs(config), config.data_config)
    batch = parser.parse([b'{"label": 1, "user": "a", "vec": [1, 2.5, 3], "price": 1}',
                          b'{"label": 0, "user": "b", "vec": "4;5;6", "price": 2}',
                          b'{"label": 0, "user": "c", "vec": [1, 2], "price": 3}'])
    np.testing.assert_allclose(batch.features["vec"].numpy(), [[1, 2.5, 3], [4, 5, 6]])
    assert [r for _, r in batch.rejected] == ["bad_value: raw feature vec: 2 numbers, raw_input_dim is 3 (joined by ';')"]


def test_the_array_fast_path_leaves_a_config_with_a_vector_to_csv_parser():
    config = _config()
    assert not supports(build_feature_specs(config), config.data_config)
    del config.feature_configs[1]
    assert supports(build_feature_specs(config), config.data_config)


def test_signatures_take_the_vector_as_dim_floats_after_parsing_and_as_one_string_in_the_export():
    specs = build_feature_specs(_config())
    assert feature_signature(specs)["vec"].shape.as_list() == [None, 3]
    assert empty_features(specs)["vec"].shape.as_list() == [0, 3]
    assert raw_input_specs(specs)["vec"].dtype == tf.string and raw_input_specs(specs)["price"].dtype == tf.float32


def test_the_export_parses_as_the_trainer_and_refuses_a_bad_vector_naming_the_feature():
    specs = build_feature_specs(_config())
    vec = specs.raw_features[0]
    lines = [b"1,a,0.5|-2|3e-1,7", b"0,b,,8"]
    parsed = CsvParser(specs).parse(lines).features["vec"].numpy()
    inputs = {"user": tf.constant(["a", "b"]), "vec": tf.constant(["0.5|-2|3e-1", ""]), "price": tf.constant([7., 8.])}
    np.testing.assert_array_equal(ServingModule.features_of(specs, inputs)["vec"].numpy(), parsed)
    with pytest.raises(tf.errors.InvalidArgumentError, match="raw feature vec needs 3 finite numbers"):
        checked_vectors(vec, tf.constant(["1|2|3", "1|2"]))


def test_the_model_scales_each_column_and_feeds_dim_columns_per_vector():
    config = _config(vec="min_val: 1 max_val: 3")
    specs = build_feature_specs(config)
    model = build_model(config, specs)
    batch = CsvParser(specs).parse([b"1,a,1|2|3,7", b"0,b,3|3|1,8"])
    _, _, dense = model.embed(dict(batch.features))
    np.testing.assert_allclose(dense.numpy(), [[0, 0.5, 1, 7], [1, 1, 0, 8]])
    logits, = model(dict(batch.features)).values()
    assert logits.shape.as_list() == [2]


def test_a_cluster_trainer_feeds_the_vector_as_dim_columns(tmp_path):
    from easyonline.distributed.cluster_config import ClusterConfig
    from easyonline.distributed.train_graph import TrainGraph
    config = _config()
    config.model_dir = str(tmp_path)
    specs = build_feature_specs(config)
    graph = TrainGraph(config, specs, ClusterConfig({"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"], "worker": []},
                                                    "chief", 0))
    placeholders = {name: values for name, values, _ in graph._feature_feeds}  # pylint: disable=protected-access
    assert placeholders["vec"].shape.as_list() == [None, 3] and placeholders["price"].shape.as_list() == [None]
    batch = CsvParser(specs).parse([b"1,a,1|2|3,7", b"0,b,4|5|6,8"])
    feed = graph.feed(batch.features, batch.labels, 0.0, {0: 2}, 0)
    np.testing.assert_allclose(feed[placeholders["vec"]], [[1, 2, 3], [4, 5, 6]])
