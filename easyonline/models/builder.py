"""Builds the model ``model_config.model_class`` names, from the registry (registry.py)."""
from easyonline.features.feature_spec import FeatureSpecs
from easyonline.models.ranking_model import RankingModel
from easyonline.models.registry import lookup
from easyonline.protos import pipeline_pb2
from easyonline.tasks import RankingTask, Tasks


def build_model(config: pipeline_pb2.PipelineConfig, specs: FeatureSpecs) -> RankingModel:
    """Assumes a validated config (the model name and DeepFM's single embedding_dim are checked there)."""
    model_config = config.model_config
    entry = lookup(model_config.model_class)
    if entry is None:
        raise KeyError(f"model_config.model_class {model_config.model_class!r} is not registered")
    field = entry.config_field
    sub = getattr(model_config, field) if model_config.HasField(field) else None
    dnn = sub.dnn if sub is not None else pipeline_pb2.DNN()
    return entry.model_class(specs, model_config, dnn, seed=config.train_config.seed, name=field,
                             tasks=build_tasks(config, specs))


def build_tasks(config: pipeline_pb2.PipelineConfig, specs: FeatureSpecs) -> Tasks:
    """The model's tasks: one binary ranking task on the first label field (what every model now learns)."""
    label = specs.label_names[0] if specs.label_names else "label"
    return Tasks([RankingTask(config.train_config.metrics_window_samples, label_name=label)])
