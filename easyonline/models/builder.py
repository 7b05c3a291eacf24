"""Chooses the model class by the name in ``model_config.model_class``."""
from easyonline.config.validate import MODEL_CLASSES
from easyonline.features.feature_spec import FeatureSpecs
from easyonline.models.deepfm import DeepFM
from easyonline.models.dnn import DNN
from easyonline.models.ranking_model import RankingModel
from easyonline.models.wide_and_deep import WideAndDeep
from easyonline.protos import pipeline_pb2

MODEL_REGISTRY = {"deepfm": DeepFM, "wide_and_deep": WideAndDeep, "dnn": DNN}


def build_model(config: pipeline_pb2.PipelineConfig, specs: FeatureSpecs) -> RankingModel:
    """Assumes a validated config (DeepFM's single embedding_dim is checked there)."""
    model_config = config.model_config
    name = MODEL_CLASSES[model_config.model_class]
    sub = getattr(model_config, name) if model_config.HasField(name) else None
    dnn = sub.dnn if sub is not None else pipeline_pb2.DNN()
    return MODEL_REGISTRY[name](specs, model_config, dnn, seed=config.train_config.seed, name=name)
