"""DeepFM (Guo et al. 2017): first-order + FM second-order + DNN, sharing embeddings.

With ``deepfm.final_dnn`` (EasyRec's), the wide vector, the FM vector and
the DNN's last layer are concatenated and a final DNN gives the logit;
``wide_output_dim`` sets the width of the first-order weights.
"""
from typing import Any, Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.features.feature_spec import FeatureSpecs
from easyonline.models.base import Embeddings
from easyonline.models.deepfm_terms import DeepFMTerms
from easyonline.models.final_dnn import FinalDNN
from easyonline.models.ranking_model import RankingModel
from easyonline.models.registry import register
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()


@register("deepfm", "DeepFM")
class DeepFM(DeepFMTerms, FinalDNN, RankingModel):
    uses_first_order = True
    one_embedding_dim = True  # the FM term takes dot products of every pair of embeddings

    def __init__(self, specs: FeatureSpecs, model_config: pipeline_pb2.ModelConfig, dnn: pipeline_pb2.DNN,
                 seed: int = 0, **kwargs: Any) -> None:
        super().__init__(specs, model_config, dnn, seed=seed, **kwargs)
        self.build_deepfm_terms()
        if model_config.deepfm.HasField("final_dnn"):
            self.build_final_dnn(model_config.deepfm.final_dnn, model_config, seed)

    def first_order_dim(self, model_config: pipeline_pb2.ModelConfig) -> int:
        return max(1, model_config.deepfm.wide_output_dim)

    def logit(self, embeddings: Embeddings, first_order: Optional[tf.Tensor], dense: Optional[tf.Tensor],
              training: Any) -> tf.Tensor:
        stacked = embeddings.stacked()
        if self.final_dnn is None:
            return self.linear_part(first_order, dense) + self.fm(stacked) + self.deep_part(embeddings, dense, training)
        return self.final_logits([self.wide_vector(first_order, dense), self.fm(stacked, per_dim=True),
                                  self.deep_hidden(embeddings, dense, training)], training)
