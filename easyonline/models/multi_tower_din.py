"""MultiTowerDIN (EasyRec's ``MultiTowerDIN``): MultiTower's towers plus DIN towers, concatenated, then
``final_dnn`` and one logit.

A DIN tower (``din_towers { input: <sequence group> dnn {...} }``) is the
target attention of the sequence group named ``input`` (a
``feature_groups.sequence_features`` group_name; an EasyRec config's
``model_config.seq_att_groups`` become such groups) with ``dnn`` as its
attention DNN: softmax weights, output [pooled sequence, keys], as EasyRec's
``MultiTowerDIN.din``.
"""
from typing import Any, Optional

from easyonline.features.sequence_settings import sequence_group_names, validate_attention_dnn
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.errors import ConfigError
from easyonline.models.multi_tower import MultiTower
from easyonline.models.base import Embeddings
from easyonline.models.registry import register
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()


@register("multi_tower_din", "MultiTowerDIN")
class MultiTowerDIN(MultiTower):
    settings_field = "multi_tower_din"

    @classmethod
    def validate_settings(cls, config: pipeline_pb2.PipelineConfig, path: str) -> None:
        settings = config.model_config.multi_tower_din
        if not settings.towers and not settings.din_towers:
            raise ConfigError(f"{path}.towers", "MultiTowerDIN needs at least one tower or din_tower")
        if settings.towers:
            super().validate_settings(config, path)
        known = sequence_group_names(config)
        for i, tower in enumerate(settings.din_towers):
            if tower.input not in known:
                raise ConfigError(f"{path}.din_towers[{i}].input", f"{tower.input!r} is not a sequence group "
                                  f"(feature_groups.sequence_features group_name: {sorted(known)})")
            validate_attention_dnn(tower.dnn, f"{path}.din_towers[{i}].dnn")

    def build_extra_towers(self, settings: pipeline_pb2.MultiTowerDIN) -> None:
        self.din_inputs = [tower.input for tower in settings.din_towers]
        self.din_towers = [self.target_attention(self.sequence_groups[tower.input], tower.dnn, "softmax", True,
                                                 self.l2, f"{tower.input}_dnn") for tower in settings.din_towers]

    def tower_outputs(self, embeddings: Embeddings, dense: Optional[tf.Tensor], training: Any) -> list:
        return super().tower_outputs(embeddings, dense, training) + [
            tower(*self.sequence_input(name, embeddings), training=training)
            for name, tower in zip(self.din_inputs, self.din_towers)]
