"""What a predict request with wrong input names is told (serve/input_names.py): the row and the input of an
uneven REST "instances" list, and every missing and unknown name with the model's closest one."""
import pytest
from tensorflow.core.framework import tensor_pb2, types_pb2

from easyonline.serve.http_api import request_inputs
from easyonline.serve.request_limits import BadRequest, check_tensor_inputs


def test_an_instance_lacking_an_input_names_its_row_and_the_input():
    """It said ``every instance must have the same inputs``: which row, which input, the user had to find."""
    rows = [{"I1": 1.0, "C5": "a"}, {"I1": 2.0, "C5": "b"}, {"I1": 3.0}]
    with pytest.raises(BadRequest) as e:
        request_inputs({"instances": rows})
    assert str(e.value).startswith("instance 2 lacks 'C5', unlike instance 0"), str(e.value)
    with pytest.raises(BadRequest, match=r"^instance 1 lacks 'C5' and has 'C55', unlike instance 0"):
        request_inputs({"instances": [{"I1": 1.0, "C5": "a"}, {"I1": 2.0, "C55": "b"}]})


def test_a_misspelled_input_is_named_with_the_closest_known_name():
    """``C55`` for ``C5`` was reported as ``missing input(s) ['C5']`` only: the typo went unnamed."""
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING)
    proto.tensor_shape.dim.add(size=1)
    proto.string_val.append(b"x")
    with pytest.raises(BadRequest) as e:
        check_tensor_inputs({"I1": proto, "C55": proto}, 10, ["I1", "C5"])
    assert str(e.value) == ("missing input(s) ['C5']; unknown input(s) ['C55'] (did you mean 'C5'?); the model "
                            "takes ['C5', 'I1']"), str(e.value)
