"""serve/request_limits.py on its own: which declared sizes pass, which are refused, and with what words
(the size bombs against a running server are in tests/integration/test_export_serve.py)."""
import pytest
from tensorflow.core.framework import tensor_pb2, types_pb2

from easyonline.serve.request_limits import BadRequest, TooManyRows, check_json_inputs, check_tensor_inputs


def _proto(dims, dtype=types_pb2.DT_FLOAT, **values):
    proto = tensor_pb2.TensorProto(dtype=dtype)
    for d in dims:
        proto.tensor_shape.dim.add(size=d)
    for field, value in values.items():
        if field == "tensor_content":
            proto.tensor_content = value
        else:
            getattr(proto, field).extend(value)
    return proto


def test_sizes_that_fit_pass_and_give_the_rows():
    assert check_tensor_inputs({"a": _proto([3], float_val=[1, 2, 3])}, 10, ["a"]) == 3
    assert check_tensor_inputs({"a": _proto([3], float_val=[1])}, 10, ["a"]) == 3  # one value fills (TF's rule)
    assert check_tensor_inputs({"a": _proto([0, 2**40])}, 10, ["a"]) == 0  # empty: no product computed
    assert check_tensor_inputs({"a": _proto([2], tensor_content=b"\0" * 8)}, 10, ["a"]) == 2
    assert check_tensor_inputs({"s": _proto([2, 1], types_pb2.DT_STRING, string_val=[b"x", b"y"])}, 10, ["s"]) == 2


@pytest.mark.parametrize("proto, words", [
    (_proto([2**31], float_val=[1]), "declares more values than the limit of 10 per input (--max_rows_per_request)"),
    (_proto([2**62, 2**62, 2**62], float_val=[1]), "--max_rows_per_request"),
    (_proto([2**31], tensor_content=b"\0" * 4), "--max_rows_per_request"),
    (_proto([-1], float_val=[1]), "negative dimension"),
    (_proto([3], float_val=[1, 2]), "declares 3 values but it holds 2"),
    (_proto([3]), "declares 3 values but it holds 0"),
    (_proto([2], tensor_content=b"\0" * 7), "not a whole number of float32 values"),
    (_proto([1], types_pb2.DT_COMPLEX64, scomplex_val=[1, 2]), "dtype"),
])
def test_declared_sizes_that_cannot_be_are_bad_requests(proto, words):
    with pytest.raises(BadRequest) as e:
        check_tensor_inputs({"a": proto}, 10, ["a"])
    assert words in str(e.value) and "'a'" in str(e.value) and not isinstance(e.value, TooManyRows)


def test_real_rows_over_the_limit_and_wrong_names():
    with pytest.raises(TooManyRows, match="holds 11 values"):
        check_tensor_inputs({"a": _proto([11], float_val=[0] * 11)}, 10, ["a"])
    with pytest.raises(BadRequest, match=r"unknown input\(s\) \['b'\]"):
        check_tensor_inputs({"a": _proto([1], float_val=[0]), "b": _proto([2**31], float_val=[0])}, 10, ["a"])
    with pytest.raises(BadRequest, match=r"missing input\(s\) \['b'\]"):
        check_tensor_inputs({"a": _proto([1], float_val=[0])}, 10, ["a", "b"])


def test_json_inputs():
    check_json_inputs({"a": [1, 2.5, "x", True, None]}, 10)
    with pytest.raises(TooManyRows, match="--max_rows_per_request"):
        check_json_inputs({"a": [0] * 11}, 10)
    with pytest.raises(BadRequest, match="'a', row 1: a list"):
        check_json_inputs({"a": [0, [1]]}, 10)
