"""A plain DNN over concatenated embeddings and numeric features."""
from easyonline.models.ranking_model import RankingModel
from easyonline.models.registry import register


@register("dnn", "DNN")
class DNN(RankingModel):
    uses_first_order = False

    def logits_from(self, embeddings, first_order, dense, training):
        return self.deep_part(embeddings, dense, training)
