"""A plain DNN over concatenated embeddings and numeric features."""
from typing import Any, Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.models.base import Embeddings
from easyonline.models.ranking_model import RankingModel
from easyonline.models.registry import register

tf = ensure_legacy_keras()


@register("dnn", "DNN")
class DNN(RankingModel):
    uses_first_order = False

    def logit(self, embeddings: Embeddings, first_order: Optional[tf.Tensor], dense: Optional[tf.Tensor],
              training: Any) -> tf.Tensor:
        return self.deep_part(embeddings, dense, training)
