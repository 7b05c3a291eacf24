"""A training step's update of the dynamic tables, checked by hand: an id seen several times in a batch gets the
sum of its gradients and one optimizer step, other ids and padding are not touched, and new ids get a drawn row.

The step updates a table's lookup buffer with a dense gradient (embedding/dynamic_tables.py
``gather_with_dense_gradient``) and draws initial rows only for ids the table lacks
(``draw_rows_for_new_ids_only``); these tests hold that to the optimizers' sparse formulas. Adam keeps a table's
m and v in one slot table (train/table_adam.py), or the trainer's tables in their own rows
(embedding/rows_with_state.py); the last test trains both against TFRA's Adam, which keeps two.
"""
import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()

import contextlib

import numpy as np
import pytest
from google.protobuf import text_format

from easyonline.config import parse_pipeline_config
from easyonline.embedding.dynamic_tables import DynamicTables
from easyonline.embedding import rows_with_state
from easyonline.embedding.rows_with_state import ColumnsSaveable, adam_state_in_rows, finish_restore, state_width
from easyonline.features.feature_spec import build_feature_specs
from easyonline.train.optimizers import build_optimizer
from easyonline.train.table_adam import keeps_slots_together
from tests.conftest import sorted_rows
from tensorflow_recommenders_addons import dynamic_embedding as de  # noqa: E402  pylint: disable=g-import-not-at-top

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


_IDS = [3, 5, 8, 13, 21]
_BATCHES = [  # per step: ids of "s" and of "n" (-1: padding, the masked lookup)
    ([3, 5, 3, 3], [5, -1, 8, 5]),
    ([8, 3, 13, 21], [21, 21, -1, 3]),
    ([5, 5, 5, 21], [13, 8, 3, -1]),
]


_START = np.arange(len(_IDS) * 2, dtype=np.float32).reshape(len(_IDS), 2) / 10.0 - 0.5


def _model(name: str, state_in_rows: bool = False):
    config = parse_pipeline_config(_CONFIG)
    text_format.Merge("adam_optimizer { learning_rate: 0.05 beta1: 0.8 beta2: 0.99 epsilon: 0.001 }",
                      config.train_config.optimizer_config)
    with adam_state_in_rows() if state_in_rows else contextlib.nullcontext():
        tables = DynamicTables(build_feature_specs(config), name=name)
    for table in ("s", "n"):  # every id has a row; none has Adam's m and v yet
        params = tables.embeddings[table].params
        assert (state_width(params), params.dim) == ((2, 6) if state_in_rows else (None, 2))
        start = np.pad(_START, [[0, 0], [0, params.dim - 2]])  # (zeros for m and v)
        params.upsert(tf.constant(_IDS, tf.int64), tf.constant(start))
    weight = tf.Variable([[1.0, -2.0]], name=f"{name}_weight")
    return tables, weight, config.train_config.optimizer_config


def _step(tables, weight, optimizer, ids, with_dense):
    with tf.GradientTape() as tape:
        rows = tables({"s": tf.constant(ids[0], tf.int64), "n": tf.constant(ids[1], tf.int64)}, training=True)
        loss = tf.reduce_sum(tf.sin(rows["s"] * weight)) + tf.reduce_sum(tf.square(rows["n"] * weight))
    variables = tables.trainable_variables + ([weight] if with_dense else [])
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))


@pytest.mark.parametrize("state_in_rows", [False, True], ids=["slot_table", "state_in_rows"])
@pytest.mark.parametrize("with_dense", [True, False], ids=["with_dense", "tables_alone"])
@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf_function"])
def test_m_and_v_in_one_table_train_as_tfras_two(traced, with_dense, state_in_rows):
    """Adam with a table's m and v side by side in one slot table (train/table_adam.py), or in the table's own
    rows (embedding/rows_with_state.py, the trainer's tables), against TFRA's Adam, which keeps them in two: the
    same rows and the same m and v after three steps, for ids whose slots are new and ids that repeat in a
    batch; with a dense variable trained by the same optimizer (its step count is shared: every step's bias
    correction must match), and without one (the optimizer of the tables alone, ``sparse_optimizer_config``:
    the step is counted by table_adam)."""
    ours, our_weight, config = _model(f"ours_{traced}_{with_dense}_{state_in_rows}", state_in_rows)
    theirs, their_weight, _ = _model(f"theirs_{traced}_{with_dense}_{state_in_rows}")
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
        theirs_layer = theirs.embeddings[table]
        keys, rows = sorted_rows(ours.rows(table))
        their_keys, their_rows = sorted_rows(theirs_layer.params)
        np.testing.assert_array_equal(keys, their_keys)
        assert not np.allclose(rows, _START)  # trained
        np.testing.assert_allclose(rows, their_rows, rtol=1e-5, atol=1e-7)
        (slots,) = ours.slot_variables(table)
        assert slots.dim == 4
        slot_keys, state = sorted_rows(slots)
        halves = {variable.name.rsplit("/", 1)[-1]: sorted_rows(variable) for variable in theirs.slot_variables(table)}
        assert sorted(halves) == ["m", "v"]
        trained = sorted({i for batch in _BATCHES for i in batch[0 if table == "s" else 1] if i >= 0})
        np.testing.assert_array_equal(slot_keys, trained)
        np.testing.assert_array_equal(halves["m"][0], trained)
        np.testing.assert_allclose(state[:, :2], halves["m"][1], rtol=1e-5, atol=1e-8)
        np.testing.assert_allclose(state[:, 2:], halves["v"][1], rtol=1e-5, atol=1e-10)


@pytest.mark.parametrize("state_order", ["same", "reversed", "absent"])
def test_a_restore_puts_each_ids_state_beside_its_row_whatever_the_entries_order(state_order):
    """A table that keeps Adam's m and v in its rows restores from two checkpoint entries (rows; m and v), each
    written as a table of its own would write it (embedding/rows_with_state.py). Written from one export, their
    keys come in the same order and are imported side by side; from two tables (a checkpoint written with the
    state apart) the order can differ and the state is joined by key; a checkpoint without the state (model
    only) leaves zeros, once ``finish_restore`` has imported the rows left waiting."""
    config = parse_pipeline_config(_CONFIG)
    with adam_state_in_rows():
        tables = DynamicTables(build_feature_specs(config), name=f"restore_{state_order}")
    (table,) = tables.embeddings["s"].params.tables
    rows_entry = ColumnsSaveable(table, "rows", source=table, start=0)
    state_entry = ColumnsSaveable(table, "state", source=table, start=2)
    keys = np.array([3, 5, 8, 13], np.int64)
    rows = np.arange(8, dtype=np.float32).reshape(4, 2)
    state = 100.0 + np.arange(16, dtype=np.float32).reshape(4, 4)
    order = np.arange(4) if state_order == "same" else np.array([2, 0, 3, 1])
    if state_order != "absent":
        state_entry.restore([tf.constant(keys[order]), tf.constant(state[order])], None)
    rows_entry.restore([tf.constant(keys), tf.constant(rows)], None)
    finish_restore(tables)
    got_keys, got = sorted_rows(table)
    np.testing.assert_array_equal(got_keys, keys)
    np.testing.assert_array_equal(got[:, :2], rows)
    np.testing.assert_array_equal(got[:, 2:], np.zeros_like(state) if state_order == "absent" else state)


@pytest.mark.parametrize("ids", [0, 5, 1000])
@pytest.mark.parametrize("pieces", [False, True], ids=["cut_from_export", "filled_by_pieces"])
def test_a_traced_saves_entries_are_each_ids_row_and_state(pieces, ids, monkeypatch):
    """A traced save of a table that keeps Adam's state in its rows writes two entries, the row columns and the
    state columns, with the keys in one order (embedding/rows_with_state.py): cut from the table's export (up
    to SAVE_WHOLE_ROWS_AT_MOST rows), or written piece by piece into tensors made empty (a bigger table; here
    forced). Both give every id its own row and state: no table, fewer ids than pieces (pieces left empty),
    and a count the pieces do not divide."""
    monkeypatch.setattr(rows_with_state, "SAVE_WHOLE_ROWS_AT_MOST", 0 if pieces else 1 << 20)
    config = parse_pipeline_config(_CONFIG)
    with adam_state_in_rows():
        tables = DynamicTables(build_feature_specs(config), name=f"save_{pieces}_{ids}")
    (table,) = tables.embeddings["s"].params.tables
    keys = np.arange(ids, dtype=np.int64) * 7919 + 3
    stored = np.random.default_rng(ids).normal(size=(ids, 6)).astype(np.float32)
    if ids:
        table.insert(tf.constant(keys), tf.constant(stored))

    @tf.function
    def entries():
        specs = (ColumnsSaveable(table, "rows", source=table, start=0).specs
                 + ColumnsSaveable(table, "state", source=table, start=2).specs)
        return [spec.tensor for spec in specs]

    row_keys, rows, state_keys, state = [t.numpy() for t in entries()]
    np.testing.assert_array_equal(row_keys, state_keys)
    assert rows.shape == (ids, 2) and state.shape == (ids, 4)
    order = np.argsort(row_keys)
    np.testing.assert_array_equal(row_keys[order], keys)
    np.testing.assert_array_equal(np.concatenate([rows, state], 1)[order], stored)


def test_a_traced_save_is_traced_again_when_a_table_grows_past_the_pieces_limit(tmp_path, monkeypatch):
    """checkpoint/traced_save.py with a table that keeps Adam's state in its rows: its entries are cut from its
    export while small, and written piece by piece once it holds over SAVE_WHOLE_ROWS_AT_MOST rows (here 10).
    The save is traced again when the table grows past it (a trace made for the small table would go on
    cutting), not at every save; each checkpoint holds the table's row columns."""
    from easyonline.checkpoint.checkpointer import Checkpointer  # why: the test's only use of it
    monkeypatch.setattr(rows_with_state, "SAVE_WHOLE_ROWS_AT_MOST", 10)
    config = parse_pipeline_config(_CONFIG)
    with adam_state_in_rows():
        tables = DynamicTables(build_feature_specs(config), name="grows")
    (table,) = tables.embeddings["s"].params.tables
    checkpointer = Checkpointer(str(tmp_path / "model"), tables, tf.keras.optimizers.Adam(0.1), 3)
    rng = np.random.default_rng(0)

    def saved_rows(path):
        reader = tf.train.load_checkpoint(path)
        names = [k for k in reader.get_variable_to_shape_map() if "emb_s" in k and k.endswith("table-values")]
        assert len(names) == 1, names
        keys = reader.get_tensor(names[0].replace("table-values", "table-keys"))
        return keys[np.argsort(keys)], reader.get_tensor(names[0])[np.argsort(keys)]

    for step, (ids, traces) in enumerate([(5, 1), (25, 2), (25, 2)]):
        keys = np.arange(ids, dtype=np.int64) * 31 + 1
        stored = rng.normal(size=(ids, 6)).astype(np.float32)
        table.insert(tf.constant(keys), tf.constant(stored))
        path = checkpointer.save({0: step}, "t")
        assert checkpointer.traced_saves.traces == traces
        got_keys, got_rows = saved_rows(path)
        np.testing.assert_array_equal(got_keys, keys)
        np.testing.assert_array_equal(got_rows, stored[:, :2])
