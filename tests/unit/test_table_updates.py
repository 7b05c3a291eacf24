"""A training step's update of the dynamic tables, checked by hand: an id seen several times in a batch gets the
sum of its gradients and one optimizer step, other ids and padding are not touched, and new ids get a drawn row.

The step updates a table's lookup buffer with a dense gradient (embedding/dynamic_tables.py
``gather_with_dense_gradient``) and draws initial rows only for ids the table lacks
(``draw_rows_for_new_ids_only``); these tests hold that to the optimizers' sparse formulas.
"""
import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()

import numpy as np
import pytest
from google.protobuf import text_format

from easyonline.config import parse_pipeline_config
from easyonline.embedding.dynamic_tables import DynamicTables
from easyonline.features.feature_spec import build_feature_specs
from easyonline.train.optimizers import build_optimizer

# "s": string ids (hashed before the tables: the plain lookup); "n": int64 ids, -1 padding (the masked one).
_CONFIG = """
model_dir: "/tmp/unused"
file_train_input { paths: "unused.csv" }
data_config {
  input_fields { input_name: "label" input_type: INT32 }
  input_fields { input_name: "s" input_type: STRING }
  input_fields { input_name: "n" input_type: INT64 }
  label_fields: "label"
  separator: ","
}
feature_configs { input_names: "s" embedding_dim: 2 }
feature_configs { input_names: "n" embedding_dim: 2 }
model_config { model_class: "dnn" dnn { dnn { hidden_units: [2] } } }
"""
_OPTIMIZERS = {
    "adam": "adam_optimizer { learning_rate: 0.1 }",
    "adagrad": "adagrad_optimizer { learning_rate: 0.1 initial_accumulator_value: 0.1 }",
}
_OLD = {7: [1.0, -2.0], 9: [0.5, 0.25]}  # rows the tables hold before the step


def _expected_rows(optimizer: str, gradients: dict) -> dict:
    """The rows after one step of ``optimizer`` (its sparse formula, tf_keras' legacy defaults) from _OLD."""
    out = {}
    for key, gradient in gradients.items():
        old, g = np.array(_OLD[key]), np.array(gradient)
        if optimizer == "adam":
            beta1, beta2, epsilon = 0.9, 0.999, 1e-7
            rate = 0.1 * np.sqrt(1 - beta2) / (1 - beta1)
            out[key] = old - rate * ((1 - beta1) * g) / (np.sqrt((1 - beta2) * g * g) + epsilon)
        else:
            out[key] = old - 0.1 * g / (np.sqrt(0.1 + g * g) + 1e-7)
    return out


@pytest.mark.parametrize("optimizer", sorted(_OPTIMIZERS))
@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf_function"])
def test_repeated_ids_get_their_summed_gradient_and_one_step(optimizer, traced):
    config = parse_pipeline_config(_CONFIG)
    text_format.Merge(_OPTIMIZERS[optimizer], config.train_config.optimizer_config)
    tables = DynamicTables(build_feature_specs(config), name=f"tables_{optimizer}_{traced}")
    opt = build_optimizer(config.train_config.optimizer_config)
    for name in ("s", "n"):
        tables.embeddings[name].params.upsert(tf.constant(list(_OLD), tf.int64), tf.constant(list(_OLD.values())))
    # Per occurrence, the loss is the row's dot product with a weight: an id's gradient is its weights' sum.
    ids = {"s": tf.constant([7, 9, 7, 7, 11], tf.int64), "n": tf.constant([9, -1, 9, 7, -1], tf.int64)}
    weights = tf.constant([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5], [-2.0, 1.0], [4.0, 4.0]])

    def step():
        with tf.GradientTape() as tape:
            rows = tables(ids, training=True)
            loss = tf.reduce_sum(rows["s"] * weights) + tf.reduce_sum(rows["n"] * weights)
        variables = tables.trainable_variables
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return rows

    rows = tf.function(step)() if traced else step()
    np.testing.assert_array_equal(rows["n"].numpy()[[1, 4]], 0.0)  # padding looks up as zeros
    new_row = rows["s"].numpy()[4]
    assert np.all(new_row != 0.0) and np.all(np.abs(new_row) < 0.5), new_row  # drawn (initializer_stddev 0.01)

    def table(name):
        values, exists = tables.embeddings[name].params.lookup(tf.constant([7, 9, 11, -1], tf.int64),
                                                               return_exists=True)
        return values.numpy(), exists.numpy()

    s, s_exists = table("s")
    expected = _expected_rows(optimizer, {7: [1.0 + 0.5 - 2.0, 2.0 + 0.5 + 1.0], 9: [3.0, -1.0]})
    np.testing.assert_allclose(s[:2], [expected[7], expected[9]], rtol=1e-5, atol=1e-6)
    assert s_exists.tolist() == [True, True, True, False]  # the new id was trained, so it is kept
    n, n_exists = table("n")
    expected = _expected_rows(optimizer, {7: [-2.0, 1.0], 9: [1.0 + 0.5, 2.0 + 0.5]})
    np.testing.assert_allclose(n[:2], [expected[7], expected[9]], rtol=1e-5, atol=1e-6)
    assert n_exists.tolist() == [True, True, False, False]  # padding never reaches the table


def test_a_table_draws_rows_only_for_the_ids_it_lacks_and_keeps_the_others():
    config = parse_pipeline_config(_CONFIG)
    tables = DynamicTables(build_feature_specs(config), name="tables_draws")
    params = tables.embeddings["s"].params
    params.upsert(tf.constant([7], tf.int64), tf.constant([[1.0, -2.0]]))
    values, exists = params.lookup(tf.constant([[7, 8], [9, 7]], tf.int64), return_exists=True)
    assert values.shape == (2, 2, 2) and exists.numpy().tolist() == [[True, False], [False, True]]
    np.testing.assert_array_equal(values.numpy()[0, 0], [1.0, -2.0])
    np.testing.assert_array_equal(values.numpy()[1, 1], [1.0, -2.0])
    drawn = values.numpy()[[0, 1], [1, 0]]
    assert np.all(drawn != 0.0) and not np.array_equal(drawn[0], drawn[1])  # each new id its own draw
    assert int(params.size()) == 1  # a lookup does not insert
