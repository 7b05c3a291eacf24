"""DeepFM (Guo et al. 2017): first-order + FM second-order + DNN, sharing embeddings.

With ``deepfm.final_dnn`` (EasyRec's), the wide vector, the FM vector and
the DNN's last layer are concatenated and a final DNN gives the logit;
``wide_output_dim`` sets the width of the first-order weights.
"""
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.models.layers import MLP, FMInteraction
from easyonline.models.ranking_model import RankingModel
from easyonline.models.registry import register
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()


@register("deepfm", "DeepFM")
class DeepFM(RankingModel):
    uses_first_order = True
    one_embedding_dim = True  # the FM term takes dot products of every pair of embeddings

    def __init__(self, specs, model_config: pipeline_pb2.ModelConfig, *args, seed: int = 0, **kwargs):
        super().__init__(specs, model_config, *args, seed=seed, **kwargs)
        self.fm = FMInteraction(name="fm")
        self.final_dnn = self.final_logit = None
        if model_config.deepfm.HasField("final_dnn"):
            final = model_config.deepfm.final_dnn
            self.final_dnn = MLP(list(final.hidden_units), final.activation, final.dropout_ratio, final.use_bn,
                                 model_config.l2_regularization, seed=seed + 200, name="final_dnn")
            self.final_logit = tf.keras.layers.Dense(1, name="final_logit")
            self.dropout_ratio = max(self.dropout_ratio, final.dropout_ratio)
            self.use_bn = self.use_bn or final.use_bn

    def first_order_dim(self, model_config: pipeline_pb2.ModelConfig) -> int:
        return max(1, model_config.deepfm.wide_output_dim)

    def logits_from(self, embeddings, first_order, dense, training):
        stacked = tf.stack(embeddings, axis=1)
        if self.final_dnn is None:
            return self.linear_part(first_order, dense) + self.fm(stacked) + self.deep_part(embeddings, dense, training)
        parts = [self.wide_vector(first_order, dense), self.fm(stacked, per_dim=True),
                 self.deep_hidden(embeddings, dense, training)]
        hidden = self.final_dnn(tf.concat(parts, axis=1), training=training)
        return tf.squeeze(self.final_logit(hidden), axis=1)
