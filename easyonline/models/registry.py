"""Models register themselves by name; the builder and the config validator both read this registry.

A model class declares its names with ``@register("deepfm", "DeepFM")``:
the first name is also the field of ``model_config`` that holds its
settings (``model_config { model_class: "DeepFM" deepfm { dnn {...} } }``),
unless ``settings_field`` names another (EasyRec's RankModel: ``model_params``).
This module loads no TensorFlow; asking for the registered models imports
the model modules (which do), so the registry is complete whoever asks first.
"""
import dataclasses
import importlib
from typing import Any, Callable, Dict, List, Optional, Type, TypeVar

# The modules whose classes register themselves; a new model adds its module here.
MODEL_MODULES = ("easyonline.models.deepfm", "easyonline.models.wide_and_deep", "easyonline.models.dnn",
                 "easyonline.models.mmoe", "easyonline.models.dbmtl", "easyonline.models.esmm",
                 "easyonline.models.multi_tower", "easyonline.models.dcn", "easyonline.models.din",
                 "easyonline.models.multi_tower_din", "easyonline.models.multi_tower_bst",
                 "easyonline.models.rank_model", "easyonline.models.multi_task_model")

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class ModelEntry:
    """A registered model: its class, its names, and the model_config field of its settings."""
    model_class: Any  # a RankingModel subclass (not imported here: this module loads no TensorFlow)
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


def _load_models() -> None:
    for module in MODEL_MODULES:
        importlib.import_module(module)  # the classes register themselves (and load TensorFlow)


def lookup(name: str) -> Optional[ModelEntry]:
    """The model registered as ``name`` (case as written), or None."""
    _load_models()
    return _ENTRIES.get(name)


def model_names() -> List[str]:
    """Every registered name, sorted."""
    _load_models()
    return sorted(_ENTRIES)
