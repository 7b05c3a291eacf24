"""Builds the model ``model_config.model_class`` names, from the registry (registry.py)."""
from typing import Any, Optional, Tuple, Type
from easyonline.features.feature_spec import FeatureSpecs
from easyonline.models.base import Model
from easyonline.models.registry import ModelEntry, lookup
from easyonline.protos import pipeline_pb2
from easyonline.tasks import Tasks
from easyonline.tasks.from_config import single_task


def build_model(config: pipeline_pb2.PipelineConfig, specs: FeatureSpecs) -> Model:
    """Assumes a validated config (the model name and DeepFM's single embedding_dim are checked there)."""
    model_config = config.model_config
    entry, field, sub = _model_entry(model_config)
    # the settings' own DNN (DeepFM's, WideAndDeep's, DNN's); a model of towers has none
    dnn = sub.dnn if "dnn" in sub.DESCRIPTOR.fields_by_name else pipeline_pb2.DNN()
    return entry.model_class(specs, model_config, dnn, seed=config.train_config.seed, name=entry.names[0],
                             tasks=build_tasks(config, specs, entry.model_class, sub, field))


def model_tasks(config: pipeline_pb2.PipelineConfig, specs: FeatureSpecs) -> Tasks:
    """The tasks ``build_model`` gives the model, without building it (e.g. an export's output names)."""
    entry, field, sub = _model_entry(config.model_config)
    return build_tasks(config, specs, entry.model_class, sub, field)


def _model_entry(model_config: pipeline_pb2.ModelConfig) -> Tuple[ModelEntry, str, Any]:
    """(registry entry, its settings' field name, its settings) of ``model_config.model_class``."""
    entry = lookup(model_config.model_class)
    if entry is None:
        raise KeyError(f"model_config.model_class {model_config.model_class!r} is not registered")
    field = entry.config_field
    return entry, field, getattr(model_config, field)  # (its defaults when not set)


def build_tasks(config: pipeline_pb2.PipelineConfig, specs: FeatureSpecs,
                model_class: Optional[Type[Model]] = None, settings: Any = None, field: str = "") -> Tasks:
    """The model's tasks: those of its settings (one per task tower, ``Model.tasks_from_settings``),
    or else the one task of ``model_config.loss_type`` on the first label field."""
    window = config.train_config.metrics_window_samples
    tasks = model_class.tasks_from_settings(settings, specs.label_names, window, f"model_config.{field}") \
        if model_class is not None and settings is not None else []
    return Tasks(tasks or [single_task(config.model_config, specs.label_names, window)])
