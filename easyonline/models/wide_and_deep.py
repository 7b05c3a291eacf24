"""Wide & Deep (Cheng et al. 2016): a linear model over ids plus a DNN.

With ``wide_and_deep.final_dnn`` (EasyRec's), the wide vector
(``wide_output_dim`` wide) and the DNN's last layer are concatenated and a
final DNN gives the logit; without it the two logits are summed.
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


@register("wide_and_deep", "WideAndDeep")
class WideAndDeep(DeepFMTerms, FinalDNN, RankingModel):
    uses_first_order = True

    def __init__(self, specs: FeatureSpecs, model_config: pipeline_pb2.ModelConfig, dnn: pipeline_pb2.DNN,
                 seed: int = 0, **kwargs: Any) -> None:
        super().__init__(specs, model_config, dnn, seed=seed, **kwargs)
        self.build_linear_term()
        if model_config.wide_and_deep.HasField("final_dnn"):
            self.build_final_dnn(model_config.wide_and_deep.final_dnn, model_config, seed)

    def first_order_dim(self, model_config: pipeline_pb2.ModelConfig) -> int:
        """As EasyRec: wide_output_dim only with final_dnn; without it the wide part is one logit."""
        wide = model_config.wide_and_deep
        return max(1, wide.wide_output_dim) if wide.HasField("final_dnn") else 1

    def logit(self, embeddings: Embeddings, first_order: Optional[tf.Tensor], dense: Optional[tf.Tensor],
              training: Any) -> tf.Tensor:
        if self.final_dnn is None:
            return self.linear_part(first_order, dense) + self.deep_part(embeddings, dense, training)
        return self.final_logits([self.wide_vector(first_order, dense), self.deep_hidden(embeddings, dense, training)],
                                 training)
