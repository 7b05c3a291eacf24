"""DeepFM (Guo et al. 2017): first-order + FM second-order + DNN, sharing embeddings."""
from easyonline import ensure_legacy_keras
from easyonline.models.layers import FMInteraction
from easyonline.models.ranking_model import RankingModel

tf = ensure_legacy_keras()


class DeepFM(RankingModel):
    uses_first_order = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fm = FMInteraction(name="fm")

    def logits_from(self, embeddings, first_order, dense, training):
        fm = self.fm(tf.stack(embeddings, axis=1))
        return self.linear_part(first_order, dense) + fm + self.deep_part(embeddings, dense, training)
