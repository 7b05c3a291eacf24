"""Models register themselves by name; the builder and the config validator both read this registry.

A model class declares its names with ``@register("deepfm", "DeepFM")``:
the first name is also the field of ``model_config`` that holds its
settings (``model_config { model_class: "DeepFM" deepfm { dnn {...} } }``),
unless ``settings_field`` names another (EasyRec's RankModel: ``model_params``).
This module loads no TensorFlow; asking for the registered models imports
every module of the ``easyonline.models`` package (they do), so the registry
is complete whoever asks first, and a new model is one module in that folder:
no list to keep.
"""
import dataclasses
import importlib
import pkgutil
from typing import Any, Callable, Dict, List, Optional, Type, TypeVar

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class ModelEntry:
    """A registered model: its class, its names, and the model_config field of its settings."""
    model_class: Any  # a base.py Model subclass (not imported here: this module loads no TensorFlow)
    names: tuple
    settings_field: str = ""

    @property
    def config_field(self) -> str:
        """The ``model_config`` field of its settings."""
        return self.settings_field or self.names[0]


_ENTRIES: Dict[str, ModelEntry] = {}


def register(*names: str, settings_field: str = "") -> Callable[[Type[T]], Type[T]]:
    """Class decorator: makes the model buildable as ``model_config.model_class: <any of names>``."""
    if not names:
        raise ValueError("register() needs at least one name")

    def decorate(cls: Type[T]) -> Type[T]:
        entry = ModelEntry(cls, tuple(names), settings_field)
        for name in names:  # every name is checked before any is taken
            if name in _ENTRIES and _ENTRIES[name].model_class is not cls:
                raise ValueError(f"model name {name!r} is registered twice "
                                 f"({_ENTRIES[name].model_class.__name__} and {cls.__name__})")
        for name in names:
            _ENTRIES[name] = entry
        return cls
    return decorate


def model_modules() -> List[str]:
    """Every module of the ``easyonline.models`` package (not its sub-packages: backbone blocks are no models)."""
    package = importlib.import_module(__package__)
    return sorted(f"{__package__}.{info.name}" for info in pkgutil.iter_modules(package.__path__) if not info.ispkg)


def _load_models() -> None:
    for module in model_modules():
        importlib.import_module(module)  # the classes register themselves (and load TensorFlow)


def lookup(name: str) -> Optional[ModelEntry]:
    """The model registered as ``name`` (case as written), or None."""
    _load_models()
    return _ENTRIES.get(name)


def model_names() -> List[str]:
    """Every registered name, sorted."""
    _load_models()
    return sorted(_ENTRIES)
