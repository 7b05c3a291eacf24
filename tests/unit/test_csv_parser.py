"""CSV parsing: types, hashing, int ids passed through, tags, and rejected lines."""
import numpy as np

from easyonline.config import parse_pipeline_config
from easyonline.config.validate import validate_pipeline_config
from easyonline.features import CsvParser, build_feature_specs
from easyonline.features.csv_parser import HASH_BUCKETS

CONFIG = '''
model_dir: "/tmp/unused"
file_train_input { paths: "unused" }
data_config {
  input_fields { input_name: "label" input_type: INT32 }
  input_fields { input_name: "price" input_type: FLOAT default_val: "1.5" }
  input_fields { input_name: "user" input_type: STRING }
  input_fields { input_name: "item" input_type: INT64 }
  input_fields { input_name: "tags" input_type: STRING }
  input_fields { input_name: "unused" input_type: STRING }
  label_fields: "label"
}
feature_configs { input_names: "price" feature_type: RawFeature }
feature_configs { input_names: "user" embedding_dim: 4 }
feature_configs { input_names: "item" embedding_dim: 4 embedding_name: "user" }
feature_configs { input_names: "tags" embedding_dim: 4 feature_type: TagFeature separator: "|" }
model_config { model_class: "dnn" }
'''


def _parser():
    config = parse_pipeline_config(CONFIG)
    validate_pipeline_config(config)
    return CsvParser(build_feature_specs(config))


def test_parses_types_hashes_strings_and_passes_int_ids():
    batch = _parser().parse([b"1,0.5,alice,9223372036854775807,a|b|c,x", b"0,,bob,0,,y\r", b""])
    assert batch.size == 2 and not batch.rejected
    np.testing.assert_allclose(batch.labels.numpy(), [1.0, 0.0])
    np.testing.assert_allclose(batch.features["price"].numpy(), [0.5, 1.5])  # default_val for an empty field
    assert batch.features["item"].numpy().tolist() == [2**63 - 1, 0]
    users = batch.features["user"].numpy()
    assert users[0] != users[1] and all(0 <= u < HASH_BUCKETS for u in users)
    assert batch.features["tags"].row_lengths().numpy().tolist() == [3, 0]


def test_same_string_hashes_the_same_in_every_batch():
    parser = _parser()
    a = parser.parse([b"1,1,alice,1,t,x"]).features["user"].numpy()[0]
    b = parser.parse([b"0,2,bob,2,t,x", b"0,2,alice,2,t,x"]).features["user"].numpy()[1]
    tag = parser.parse([b"0,2,bob,2,alice,x"]).features["tags"].flat_values.numpy()[0]
    assert a == b == tag


def test_bad_lines_are_rejected_with_reasons_and_the_rest_parsed():
    batch = _parser().parse([b"1,0.5,alice,7,a,x", b"1,2", b"0,zz,bob,8,b,x", b"1,1,carol,9223372036854775808,c,x",
                             b"0,3,dave,9,d,x"])
    assert batch.size == 2
    assert batch.features["item"].numpy().tolist() == [7, 9]
    reasons = [r for _, r in batch.rejected]
    assert len(reasons) == 3
    assert "expected 6 fields, got 2" in reasons[0]
    assert "not a valid float" in reasons[1]
    assert "int64" in reasons[2]
