"""Wide & Deep (Cheng et al. 2016): a linear model over ids plus a DNN."""
from easyonline.models.ranking_model import RankingModel
from easyonline.models.registry import register


@register("wide_and_deep", "WideAndDeep")
class WideAndDeep(RankingModel):
    uses_first_order = True

    def logits_from(self, embeddings, first_order, dense, training):
        return self.linear_part(first_order, dense) + self.deep_part(embeddings, dense, training)
