"""One checkpointer for both step engines (checkpoint/checkpointer.py): a graph's variables saved through a
session come back in a single process's eager variables, step, samples and positions included, and back
into a graph; a restore whose step does not match fails."""
import contextlib

import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()

import numpy as np
import pytest

from easyonline.checkpoint.checkpointer import Checkpointer
from easyonline.checkpoint.positions import StreamPositions


class GraphIO:
    """A session's access to a local graph, as distributed/checkpoint_io.py SessionIO gives a cluster trainer's
    (which also puts every file on the chief's CPU, a device only a running cluster has)."""

    options = None

    def __init__(self, graph, session):
        self.graph, self.session = graph, session

    def read(self, variable):
        return self.session.run(variable)

    def context(self):
        stack = contextlib.ExitStack()
        stack.enter_context(self.graph.as_default())
        stack.enter_context(self.session.as_default())
        return stack

    def finish_restore(self, status):
        status.run_restore_ops(self.session)


class Model(tf.Module):
    def __init__(self):
        super().__init__()
        self.weight = tf.Variable([0.0, 0.0], name="weight")


def _graph_checkpointer(model_dir):
    graph = tf.Graph()
    with graph.as_default():
        model = Model()
        step = tf.Variable(0, dtype=tf.int64, name="global_step")
        samples = tf.Variable(0, dtype=tf.int64, name="samples")
        positions = StreamPositions()
        session = tf.compat.v1.Session(graph=graph)
        session.run(tf.compat.v1.global_variables_initializer())
    positions.bind(session.run)
    checkpointer = Checkpointer(model_dir, model, tf.Module(), 3, step=step, samples=samples, positions=positions,
                                io=GraphIO(graph, session), pull=False)
    return graph, session, model, step, samples, checkpointer


def test_a_graphs_checkpoint_restores_in_a_single_process_and_back(tmp_path):
    model_dir = str(tmp_path)
    graph, session, model, step, samples, checkpointer = _graph_checkpointer(model_dir)
    with graph.as_default():
        session.run([model.weight.assign([1.5, -2.0]), step.assign(7), samples.assign(700)])
    path = checkpointer.save({1: 30, 0: 12}, "clicks")
    assert path.endswith("model.ckpt-7") and checkpointer.last_saved_step == 7
    session.close()

    eager_model = Model()
    eager = Checkpointer(model_dir, eager_model, tf.Module(), 3)
    assert eager.restore_latest() == path
    assert eager_model.weight.numpy().tolist() == [1.5, -2.0]
    assert int(eager.step.numpy()) == 7 and int(eager.samples.numpy()) == 700
    assert eager.positions == {0: 12, 1: 30} and eager.positions_topic == "clicks"

    eager_model.weight.assign([3.0, 4.0])
    eager.step.assign(9)
    eager.save({0: 20, 1: 40}, "clicks")
    graph, session, model, step, samples, again = _graph_checkpointer(model_dir)
    assert again.restore_latest().endswith("model.ckpt-9")
    assert session.run(model.weight).tolist() == [3.0, 4.0] and again.last_saved_step == 9
    assert again.positions == {0: 20, 1: 40}


def test_a_restore_whose_step_does_not_match_fails(tmp_path):
    model = Model()
    checkpointer = Checkpointer(str(tmp_path), model, tf.Module(), 3)
    checkpointer.step.assign(5)
    path = checkpointer.save({}, "")
    reader = Checkpointer(str(tmp_path), Model(), tf.Module(), 3)
    reader.checkpoint.restore = lambda *a, **k: tf.train.Checkpoint().restore(None)  # restores nothing
    with pytest.raises(RuntimeError, match="step 0 != saved 5"):
        reader.restore_latest()
    assert path.endswith("model.ckpt-5")


def _trained_keras_model(optimizer, steps: int):
    model = tf.keras.Sequential([tf.keras.layers.Dense(3, input_shape=(4,))])
    model.build((None, 4))
    for step in range(steps):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(tf.ones([2, 4]) * (step + 1)) ** 2)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return model


def test_a_single_process_save_is_one_traced_call_that_writes_what_tensorflows_own_save_writes(tmp_path):
    """checkpoint/traced_save.py: saves run traced (once per set of objects saved), and the checkpoint holds the
    same keys and values as TensorFlow's op-by-op save of the same objects; an optimizer's slots, made at its
    first step after a save was traced already, are in the next checkpoint (the save is traced again)."""
    optimizer = tf.keras.optimizers.Adam(0.1)
    model = _trained_keras_model(optimizer, 0)
    checkpointer = Checkpointer(str(tmp_path / "model"), model, optimizer, 3)
    first = checkpointer.save({0: 1}, "t")
    assert checkpointer.traced_saves.traces == 1
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(tf.ones([2, 4])) ** 2)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    checkpointer.step.assign(1)
    traced = checkpointer.save({0: 2}, "t")
    checkpointer.step.assign(2)
    again = checkpointer.save({0: 3}, "t")
    assert checkpointer.traced_saves.traces == 2  # the slots came; the third save reused the second's trace
    eager_prefix = str(tmp_path / "eager" / "ckpt")
    checkpointer.traced_saves._eager_save(eager_prefix)  # TensorFlow's own save, op by op, of the same objects

    saved, eager = tf.train.load_checkpoint(again), tf.train.load_checkpoint(eager_prefix)
    keys = sorted(saved.get_variable_to_shape_map())
    assert keys == sorted(eager.get_variable_to_shape_map())
    slots = [key for key in keys if key.startswith("optimizer/_variables/")]
    assert len(slots) == 4, keys  # m and v of the kernel and of the bias
    assert not set(slots) & set(tf.train.load_checkpoint(first).get_variable_to_shape_map())
    for key in keys:
        assert np.array_equal(saved.get_tensor(key), eager.get_tensor(key)), key
    assert sorted(tf.train.load_checkpoint(traced).get_variable_to_shape_map()) == keys

    restored_model = _trained_keras_model(tf.keras.optimizers.Adam(0.1), 0)
    restored_optimizer = tf.keras.optimizers.Adam(0.1)
    reader = Checkpointer(str(tmp_path / "model"), restored_model, restored_optimizer, 3)
    assert reader.restore_latest() == again and reader.positions == {0: 3}
    for mine, theirs in zip(restored_model.weights, model.weights):
        assert (mine.numpy() == theirs.numpy()).all()
