"""A predict request's declared sizes, checked before anything is built from them.

A TensorProto says its shape and holds its values separately, and
TensorFlow's ``make_ndarray`` fills the declared shape: a 30-byte request
declaring shape ``[2**31]`` with one value became 2**31 values (tens of GB
as a Python list) before the row limit was looked at. So both APIs check
first, on the request as received:

- gRPC (``check_tensor_inputs``): the input names (the model's, no other),
  each tensor's dtype (numbers, strings or bools), every dimension
  (not negative), the product of the dimensions (at most
  ``--max_rows_per_request`` values per input: the model takes one value
  per row and input), and the values held against that product (as many,
  or one that TensorFlow repeats); a ``tensor_content`` of the declared size.
  The message itself is bounded by ``--max_request_bytes`` (the gRPC
  server's max_receive_message_length).
- REST (``check_json_inputs``): at most ``--max_rows_per_request`` values per
  input, each one number, string or bool (no nested lists); the body is
  bounded by ``--max_request_bytes`` before it is read, and a body nested too
  deeply for the JSON decoder is a bad request, not a server error.

A request that holds more rows than the limit is TooManyRows (REST 413, gRPC
RESOURCE_EXHAUSTED: split it); one that declares more values than it holds,
or sizes that cannot be, is a BadRequest (REST 400, gRPC INVALID_ARGUMENT);
both messages name the limit. Nothing is allocated for either.
"""
from typing import Collection, Dict, List, Mapping, Sequence

from easyonline.serve.input_names import name_mismatch

# dtype enum (tensorflow/core/framework/types.proto) -> (name, TensorProto field holding its values, bytes each)
_DTYPES = {1: ("float32", "float_val", 4), 2: ("float64", "double_val", 8), 3: ("int32", "int_val", 4),
           4: ("uint8", "int_val", 1), 5: ("int16", "int_val", 2), 6: ("int8", "int_val", 1),
           7: ("string", "string_val", 0), 9: ("int64", "int64_val", 8), 10: ("bool", "bool_val", 1),
           19: ("float16", "half_val", 2)}
_LIMIT = "--max_rows_per_request"


class BadRequest(ValueError):
    """A request that cannot be answered as it is (REST 400, gRPC INVALID_ARGUMENT); the message says why."""


class TooManyRows(BadRequest):
    """More rows than --max_rows_per_request (REST 413, gRPC RESOURCE_EXHAUSTED)."""


def _declared_values(name: str, dims: Sequence[int], max_values: int) -> int:
    """The product of ``dims``, or max_values + 1 as soon as it is known to be larger (no huge products)."""
    if any(d < 0 for d in dims):
        raise BadRequest(f"input {name!r}: shape {list(dims)} has a negative dimension")
    if 0 in dims:
        return 0
    product = 1
    for d in dims:
        product *= d
        if product > max_values:
            return max_values + 1
    return product


def check_tensor_inputs(inputs: Mapping, max_values: int, names: Collection[str], exact: bool = False,
                        limit: str = _LIMIT, optional: Collection[str] = ()) -> int:
    """Checks gRPC ``PredictRequest.inputs`` ({name: TensorProto}) before any is converted; returns the rows
    (values of the longest input). Raises BadRequest or TooManyRows naming the input and ``limit``.

    ``exact``: every tensor holds each value its shape declares (no single value that TensorFlow repeats), so
    what is built is no larger than the request received (the update signatures' rule). ``optional``: names
    that may be left out (inputs with a default_val)."""
    mismatch = name_mismatch(inputs, names, optional)
    if mismatch:
        raise BadRequest(mismatch)
    rows = 0
    for name, proto in inputs.items():
        if proto.dtype not in _DTYPES:
            raise BadRequest(f"input {name!r}: dtype {proto.dtype} is not one a predict input takes "
                             f"({', '.join(sorted(d[0] for d in _DTYPES.values()))})")
        dtype, field, size = _DTYPES[proto.dtype]
        dims = [d.size for d in proto.tensor_shape.dim]
        declared = _declared_values(name, dims, max_values)
        if proto.tensor_content:
            if not size or len(proto.tensor_content) % size:
                raise BadRequest(f"input {name!r}: tensor_content of {len(proto.tensor_content)} bytes is not a "
                                 f"whole number of {dtype} values")
            held = len(proto.tensor_content) // size
        else:
            held = len(getattr(proto, field))
        shown = dims if declared <= max_values else f"{dims} (over {max_values:,} values)"
        if declared > max_values:
            if held > max_values:
                raise TooManyRows(f"input {name!r} holds {held:,} values; the limit is {max_values:,} values per "
                                  f"input ({limit})")
            raise BadRequest(f"input {name!r}: shape {shown} declares more values than the limit of {max_values:,} "
                             f"per input ({limit}) and holds {held:,}")
        if held != declared and not (held == 1 and not proto.tensor_content and not exact):  # one fills (TF's rule)
            raise BadRequest(f"input {name!r}: shape {dims} declares {declared:,} values but it holds {held:,}")
        rows = max(rows, declared)
    return rows


def check_json_inputs(inputs: Dict[str, List], max_rows: int) -> None:
    """Checks the REST body's inputs ({name: [value per row]}, from either form) before any array is built:
    at most ``max_rows`` values each, every one a number, string or bool (or null, which the conversion to
    the input's dtype refuses, naming it)."""
    for name, values in inputs.items():
        if len(values) > max_rows:
            raise TooManyRows(f"request of {len(values)} rows is over the limit of {max_rows} ({_LIMIT})")
        for i, value in enumerate(values):
            if value is not None and not isinstance(value, (str, int, float, bool)):  # None: refused as a value
                raise BadRequest(f"input {name!r}, row {i}: a {type(value).__name__}; each input takes one number "
                                 "or string a row")
