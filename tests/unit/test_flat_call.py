"""core/flat_call.py: a concrete function called with its tensors flat answers as its ordinary call does, takes
numpy arrays as the signature's dtypes, and refuses a tensor of another dtype naming its place."""
import numpy as np
import pytest

import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.flat_call import flat_call

tf = ensure_legacy_keras()


def test_a_flat_call_answers_as_the_ordinary_call_and_refuses_a_wrong_dtype():
    offset = tf.Variable(10.0)  # a capture, resolved once by the flat call

    def step(ids, inputs, now):
        return {"sum": tf.cast(tf.reduce_sum(ids), tf.float64) + now,
                "scaled": inputs["x"] * inputs["y"] + offset}

    concrete = tf.function(step, autograph=False).get_concrete_function(
        tf.TensorSpec([None], tf.int64), {"y": tf.TensorSpec([None], tf.float32), "x": tf.TensorSpec([None], tf.float32)},
        tf.TensorSpec([], tf.float64))
    called = flat_call(concrete)
    ids, x, y = np.array([1, 2, 3]), np.array([1.5, 2.0], np.float32), np.array([2.0, 4.0], np.float32)
    flat = called(ids, {"x": x, "y": y}, tf.constant(0.5, tf.float64))  # numpy (int64 from the default int) and tensors
    plain = concrete(tf.constant(ids), {"x": tf.constant(x), "y": tf.constant(y)}, tf.constant(0.5, tf.float64))
    assert float(flat["sum"]) == float(plain["sum"]) == 6.5
    assert flat["scaled"].numpy().tolist() == plain["scaled"].numpy().tolist() == [13.0, 18.0]
    offset.assign(0.0)
    assert called(ids, {"x": x, "y": y}, 0.5)["scaled"].numpy().tolist() == [3.0, 8.0]  # the variable read live
    with pytest.raises(TypeError, match="flat argument 1 is float64, the signature takes float32"):
        called(ids, {"x": tf.constant([1.0, 2.0], tf.float64), "y": y}, 0.5)
