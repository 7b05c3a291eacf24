"""Ranking models over dynamic embeddings, chosen by name in model_config."""
from easyonline.models.builder import build_model, MODEL_REGISTRY
from easyonline.models.ranking_model import RankingModel
