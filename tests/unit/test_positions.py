"""The positions a checkpoint holds come back exactly, and only with the checkpoint they were saved in."""
from easyonline.checkpoint.positions import StreamPositions
from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()


def test_positions_are_restored_with_their_checkpoint(tmp_path):
    positions = StreamPositions()
    step = tf.Variable(0, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(step=step, positions=positions.variable)
    positions.assign({1: 250, 0: 7})
    step.assign(3)
    first = checkpoint.write(str(tmp_path / "a"))
    positions.assign({0: 9, 1: 300})
    step.assign(4)
    checkpoint.write(str(tmp_path / "b"))

    restored = StreamPositions()
    restored_step = tf.Variable(0, dtype=tf.int64)
    tf.train.Checkpoint(step=restored_step, positions=restored.variable).read(first).assert_consumed()
    assert restored.value() == {0: 7, 1: 250} and int(restored_step.numpy()) == 3


def test_empty_positions():
    assert StreamPositions().value() == {}


def test_the_same_positions_variable_serves_a_session_step_engine(tmp_path):
    """In a graph (between-graph replication) the one StreamPositions runs through the session it is bound
    to, and a checkpoint it wrote restores into the single process's, topic included."""
    graph = tf.Graph()
    with graph.as_default():
        positions = StreamPositions()
        checkpoint = tf.train.Checkpoint(positions=positions.variable)
        session = tf.compat.v1.Session(graph=graph)
        session.run(positions.variable.initializer)
        positions.bind(session.run)
        positions.assign({2: 40, 0: 5}, "clicks")
        assert positions.value() == {0: 5, 2: 40} and positions.topic() == "clicks"
        with session.as_default():
            path = checkpoint.write(str(tmp_path / "graph"))
        session.close()
    eager = StreamPositions()
    tf.train.Checkpoint(positions=eager.variable).restore(path).expect_partial()
    assert eager.value() == {0: 5, 2: 40} and eager.topic() == "clicks"


def test_a_graph_positions_variable_needs_its_session():
    with tf.Graph().as_default():
        positions = StreamPositions()
        try:
            positions.value()
        except RuntimeError as e:
            assert "bind" in str(e)
        else:
            raise AssertionError("read without a session")
