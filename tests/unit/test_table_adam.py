"""Adam with a table's m and v side by side in one slot table (train/table_adam.py) against TFRA's Adam, which
keeps them in two: the same rows and the same m and v after several steps, eager and traced, for ids whose
slots are new and ids that repeat in a batch; with a dense variable trained by the same optimizer (its step
count is shared: the bias correction of every step must match), and without one (the optimizer of the tables
alone, ``sparse_optimizer_config``: the step is counted here)."""
import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()

import numpy as np
import pytest

from easyonline.config import parse_pipeline_config
from easyonline.embedding.dynamic_tables import DynamicTables
from easyonline.features.feature_spec import build_feature_specs
from easyonline.train.optimizers import build_optimizer
from easyonline.train.table_adam import keeps_slots_together
from tensorflow_recommenders_addons import dynamic_embedding as de  # noqa: E402  pylint: disable=g-import-not-at-top

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
feature_configs { input_names: "s" embedding_dim: 3 }
feature_configs { input_names: "n" embedding_dim: 3 }
model_config { model_class: "dnn" dnn { dnn { hidden_units: [2] } } }
train_config { optimizer_config { adam_optimizer { learning_rate: 0.05 beta1: 0.8 beta2: 0.99 epsilon: 0.001 } } }
"""
_IDS = [3, 5, 8, 13, 21]
_BATCHES = [  # per step: ids of "s" and of "n" (-1: padding, the masked lookup)
    ([3, 5, 3, 3], [5, -1, 8, 5]),
    ([8, 3, 13, 21], [21, 21, -1, 3]),
    ([5, 5, 5, 21], [13, 8, 3, -1]),
]


def _model(name: str):
    config = parse_pipeline_config(_CONFIG)
    tables = DynamicTables(build_feature_specs(config), name=name)
    start = np.arange(len(_IDS) * 3, dtype=np.float32).reshape(len(_IDS), 3) / 10.0 - 0.7
    for table in ("s", "n"):  # every id has a row; none has Adam's m and v yet
        tables.embeddings[table].params.upsert(tf.constant(_IDS, tf.int64), tf.constant(start))
    weight = tf.Variable([[1.0, -2.0, 0.5]], name=f"{name}_weight")
    return tables, weight, config.train_config.optimizer_config


def _step(tables, weight, optimizer, ids, with_dense):
    with tf.GradientTape() as tape:
        rows = tables({"s": tf.constant(ids[0], tf.int64), "n": tf.constant(ids[1], tf.int64)}, training=True)
        loss = tf.reduce_sum(tf.sin(rows["s"] * weight)) + tf.reduce_sum(tf.square(rows["n"] * weight))
    variables = tables.trainable_variables + ([weight] if with_dense else [])
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))


def _sorted(variable):
    keys, values = variable.export()
    order = np.argsort(keys.numpy())
    return keys.numpy()[order], values.numpy()[order]


@pytest.mark.parametrize("with_dense", [True, False], ids=["with_dense", "tables_alone"])
@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf_function"])
def test_m_and_v_in_one_table_train_as_tfras_two(traced, with_dense):
    ours, our_weight, config = _model(f"ours_{traced}_{with_dense}")
    theirs, their_weight, _ = _model(f"theirs_{traced}_{with_dense}")
    our_optimizer = build_optimizer(config)
    assert keeps_slots_together(our_optimizer)
    a = config.adam_optimizer
    their_optimizer = de.DynamicEmbeddingOptimizer(tf.keras.optimizers.legacy.Adam(
        a.learning_rate, beta_1=a.beta1, beta_2=a.beta2, epsilon=a.epsilon))
    our_step, their_step = (tf.function(_step), tf.function(_step)) if traced else (_step, _step)
    for ids in _BATCHES:
        our_step(ours, our_weight, our_optimizer, ids, with_dense)
        their_step(theirs, their_weight, their_optimizer, ids, with_dense)
    np.testing.assert_allclose(our_weight.numpy(), their_weight.numpy(), rtol=1e-6)
    assert int(our_optimizer.iterations.numpy()) == int(their_optimizer.iterations.numpy()) == 3
    for table in ("s", "n"):
        mine, theirs_layer = ours.embeddings[table], theirs.embeddings[table]
        keys, rows = _sorted(mine.params)
        their_keys, their_rows = _sorted(theirs_layer.params)
        np.testing.assert_array_equal(keys, their_keys)
        assert not np.allclose(rows, np.arange(15, dtype=np.float32).reshape(5, 3) / 10.0 - 0.7)  # trained
        np.testing.assert_allclose(rows, their_rows, rtol=1e-5, atol=1e-7)
        (slots,) = ours.slot_variables(table)
        assert slots.dim == 6
        slot_keys, state = _sorted(slots)
        halves = {variable.name.rsplit("/", 1)[-1]: _sorted(variable) for variable in theirs.slot_variables(table)}
        assert sorted(halves) == ["m", "v"]
        trained = sorted({i for batch in _BATCHES for i in batch[0 if table == "s" else 1] if i >= 0})
        np.testing.assert_array_equal(slot_keys, trained)
        np.testing.assert_array_equal(halves["m"][0], trained)
        np.testing.assert_allclose(state[:, :3], halves["m"][1], rtol=1e-5, atol=1e-8)
        np.testing.assert_allclose(state[:, 3:], halves["v"][1], rtol=1e-5, atol=1e-10)
