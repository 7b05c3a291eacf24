"""Loads a user's parse function named in the config (no TensorFlow import here, so validation stays light)."""
import importlib
from typing import Any, Callable

from easyonline.core.errors import ConfigError


def load_parse_fn(spec: str, path: str = "data_config.parse_fn") -> Callable[[bytes], Any]:
    """Imports "package.module:function"; a ConfigError names the field when it cannot."""
    module_name, _, function_name = spec.partition(":")
    if not module_name or not function_name:
        raise ConfigError(path, f"{spec!r} is not 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(path, f"cannot import {module_name!r}: {e}") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ConfigError(path, f"{module_name!r} has no function {function_name!r}")
    return function
