"""DeepFM (Guo et al. 2017): first-order + FM second-order + DNN, sharing embeddings."""
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.models.layers import FMInteraction
from easyonline.models.ranking_model import RankingModel
from easyonline.models.registry import register

tf = ensure_legacy_keras()


@register("deepfm", "DeepFM")
class DeepFM(RankingModel):
    uses_first_order = True
    one_embedding_dim = True  # the FM term takes dot products of every pair of embeddings

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fm = FMInteraction(name="fm")

    def logits_from(self, embeddings, first_order, dense, training):
        fm = self.fm(tf.stack(embeddings, axis=1))
        return self.linear_part(first_order, dense) + fm + self.deep_part(embeddings, dense, training)
