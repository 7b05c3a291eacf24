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
