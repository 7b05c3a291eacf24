"""ComboFeature and bucketized RawFeature: the same ids from the trainer's parser (TensorFlow), the export's
serving inputs (TensorFlow) and the reader process's parsers (compiled and numpy), and a clear error for bad
values."""
import numpy as np

from easyonline.config import parse_pipeline_config
from easyonline.config.validate import validate_pipeline_config
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.export.serving_module import ServingModule, raw_input_specs
from easyonline.features import build_feature_specs
from easyonline.features.cross_ids_tf import bucketize, cross_ids
from easyonline.features.cross_ids_numpy import bucketize_np, cross_ids_np, fingerprint_cat64_np
from easyonline.features.csv_parser import CsvParser
from easyonline.features.vector_csv import VectorCsvParser, array_path_refusal, native_available, supports

tf = ensure_legacy_keras()

CONFIG = """
model_dir: "/tmp/unused"
file_train_input { paths: "/tmp/unused.csv" }
data_config {
  input_fields { input_name: "label" input_type: INT32 }
  input_fields { input_name: "user" input_type: STRING }
  input_fields { input_name: "movie" input_type: INT64 }
  input_fields { input_name: "hour" input_type: INT32 }
  input_fields { input_name: "price" input_type: FLOAT default_val: "1.5" }
  input_fields { input_name: "genres" input_type: STRING }
  label_fields: "label"
}
feature_configs { input_names: "user" embedding_dim: 4 }
feature_configs { feature_name: "user_movie" input_names: ["user", "movie"] feature_type: ComboFeature
                  embedding_dim: 4 padding: "-1" }
feature_configs { feature_name: "user_hour" input_names: ["user", "hour"] feature_type: ComboFeature
                  embedding_dim: 4 hash_bucket_size: 1000 }
feature_configs { feature_name: "price_bucket" input_names: "price" feature_type: RawFeature
                  boundaries: [0, 1.5, 10] embedding_dim: 4 }
feature_configs { input_names: "price" feature_type: RawFeature }
%s
model_config { model_class: "wide_and_deep" }
"""
USER_GENRES = """feature_configs { feature_name: "user_genres" input_names: ["user", "genres"] feature_type: ComboFeature
                  combo_input_seps: ["", "|"] embedding_dim: 4 combiner: "sum" }"""


def _specs(extra=""):
    config = parse_pipeline_config(CONFIG % extra)
    validate_pipeline_config(config)
    return build_feature_specs(config)


def test_numpy_and_tensorflow_crosses_and_buckets_agree():
    rng = np.random.default_rng(7)
    a = rng.integers(0, 2**63 - 1, 500, dtype=np.int64)
    b = rng.integers(0, 2**63 - 1, 500, dtype=np.int64)
    b[::50] = -1  # padding
    for buckets in (0, 1000):
        expected = cross_ids_np([a, b], buckets)
        np.testing.assert_array_equal(cross_ids([tf.constant(a), tf.constant(b)], buckets).numpy(), expected)
        assert (expected[::50] == -1).all() and (expected[1::50] >= 0).all()
        assert expected.max() < (buckets or 2**63 - 1)
    assert len(set(cross_ids_np([a, b]).tolist())) > 480  # a real hash, not a constant
    assert (cross_ids_np([a, b]) != cross_ids_np([b, a])).mean() > 0.9  # the inputs' order matters
    values = np.array([-1, 0, 0.5, 1.5, 1.5000001, 9.99, 10, 1e9], np.float32)
    np.testing.assert_array_equal(bucketize_np(values, [0, 1.5, 10]), [0, 1, 1, 2, 2, 2, 3, 3])
    np.testing.assert_array_equal(bucketize(tf.constant(values), [0, 1.5, 10]).numpy(), [0, 1, 1, 2, 2, 2, 3, 3])


def test_a_multi_valued_input_crosses_every_value():
    users = tf.constant([5, 6, 7, -1], tf.int64)  # the last user is padding: its row gets no ids
    genres = tf.ragged.constant([[1, 2], [], [3], [4]], tf.int64)
    crossed = cross_ids([users, genres])
    assert crossed.row_lengths().numpy().tolist() == [2, 0, 1, 0]

    def reference(user, genre):
        return int(cross_ids_np([np.array([user]), np.array([genre])])[0])
    assert crossed.to_list() == [[reference(5, 1), reference(5, 2)], [], [reference(7, 3)], []]
    three = cross_ids([genres, users, genres])  # n x 1 x n per row
    assert three.row_lengths().numpy().tolist() == [4, 0, 1, 0]
    h = fingerprint_cat64_np(np.array([3], np.uint64), np.array([1], np.uint64))
    h = fingerprint_cat64_np(fingerprint_cat64_np(h, np.array([5], np.uint64)), np.array([2], np.uint64))
    assert three.to_list()[0][1] == int(h[0] % np.uint64(2**63 - 1))  # (1, 5, 2): left-major order


LINES = [b"1,alice,10,3,2.5,Drama|Comedy", b"0,bob,-1,23,,Action", b"1,alice,11,0,-4,", b"0,carol,10,3,10,Drama"]


def test_trainer_serving_and_reader_process_give_the_same_ids():
    specs = _specs()
    trainer = CsvParser(specs).parse(LINES)
    assert not trainer.rejected
    ids = {name: trainer.features[name].numpy() for name in ("user", "user_movie", "user_hour", "price_bucket")}
    assert ids["user_movie"][1] == -1  # movie -1 is padding
    assert ids["user_movie"][0] != ids["user_movie"][2] and ids["user_hour"].max() < 1000
    assert ids["price_bucket"].tolist() == [2, 2, 0, 3]  # the empty price takes its default, 1.5
    # the export's signature: raw inputs by field, typed as raw_input_specs says
    columns = list(zip(*[line.split(b",") for line in LINES]))
    inputs = {"user": tf.constant(columns[1]), "movie": tf.constant([int(v) for v in columns[2]], tf.int64),
              "hour": tf.constant([int(v) for v in columns[3]], tf.int64),
              "price": tf.constant([float(v or 1.5) for v in columns[4]], tf.float32)}
    assert {name: spec.dtype for name, spec in raw_input_specs(specs).items()} == {
        "user": tf.string, "movie": tf.int64, "hour": tf.int64, "price": tf.float32}
    served = ServingModule.features_of(specs, inputs)
    for name, values in ids.items():
        np.testing.assert_array_equal(served[name].numpy(), values, err_msg=name)
    for native in (False, True) if native_available() else (False,):
        batch = VectorCsvParser(specs, native=native).parse([line.rsplit(b",", 1)[0] + b"," for line in LINES])
        assert batch is not None, native
        for name, values in ids.items():
            np.testing.assert_array_equal(batch.features[name], values, err_msg=f"{name} native={native}")
        np.testing.assert_array_equal(batch.features["price"], trainer.features["price"].numpy())


def test_a_multi_valued_cross_in_the_trainer_and_in_serving():
    specs = _specs(USER_GENRES)
    trainer = CsvParser(specs).parse(LINES).features["user_genres"]
    assert trainer.row_lengths().numpy().tolist() == [2, 1, 0, 1]
    assert trainer[0, 0].numpy() != trainer[3, 0].numpy()  # (alice, Drama) and (carol, Drama)
    columns = list(zip(*[line.split(b",") for line in LINES]))
    inputs = {"user": tf.constant(columns[1]), "movie": tf.constant([int(v) for v in columns[2]], tf.int64),
              "hour": tf.constant([int(v) for v in columns[3]], tf.int64),
              "price": tf.constant([float(v or 1.5) for v in columns[4]], tf.float32), "genres": tf.constant(columns[5])}
    served = ServingModule.features_of(specs, inputs)["user_genres"]
    assert served.to_list() == trainer.to_list()
    config = parse_pipeline_config(CONFIG % USER_GENRES)
    assert not supports(specs, config.data_config)  # multi-valued: the reader process leaves it to CsvParser
    assert array_path_refusal(specs, config.data_config).endswith("crosses a multi-value field")


def test_a_bad_number_in_a_bucketized_field_rejects_that_line_only():
    batch = CsvParser(_specs()).parse(LINES[:1] + [b"1,dave,10,3,cheap,Drama"] + LINES[1:2])
    assert batch.size == 2
    (line, reason), = batch.rejected
    assert line.startswith(b"1,dave") and "float" in reason, reason
