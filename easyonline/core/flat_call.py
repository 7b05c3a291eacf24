"""Calling a traced (concrete) function with its tensors flat, its captures resolved once.

A concrete function's ordinary call binds its arguments to the signature
(converting and checking each, ~1 ms of a DeepFM training step with five
arguments on the project's 2-core machine) and resolves every captured
table and variable again (for distributed variables a single process never
holds). Callers that build their arguments to the signature's types and
call the same function over and over (the training step, a served predict)
skip both, as TensorFlow's own ``ConcreteFunction._call_flat`` does.
"""
from typing import Any, Callable

from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()


def flat_call(function: Any) -> Callable[..., Any]:
    """``function`` (a concrete function) as a callable of the same positional arguments, flattened in nest's
    order of its signature: numpy arrays become tensors of the signature's dtypes, tensors of another dtype are
    refused (TypeError).
    Where TensorFlow lacks ``_call_flat`` (not public API), the plain call."""
    call = next((c._call_flat for c in type(function).__mro__  # pylint: disable=protected-access
                 if c.__name__ == "ConcreteFunction" and hasattr(c, "_call_flat")), None)
    if call is None:
        return function
    args, _ = function.structured_input_signature
    dtypes = [spec.dtype for spec in tf.nest.flatten(args)]
    captures = list(function.captured_inputs)

    def called(*arguments):
        flat = []
        for place, (value, dtype) in enumerate(zip(tf.nest.flatten(arguments), dtypes)):
            if not tf.is_tensor(value):
                value = tf.constant(value, dtype)
            elif value.dtype != dtype:  # (only a tensor passed as it is can differ; TensorFlow's error would not
                # say which argument)
                raise TypeError(f"{function.name}: flat argument {place} is {value.dtype.name}, the signature takes "
                                f"{dtype.name}")
            flat.append(value)
        return call(function, flat, captures)

    return called
