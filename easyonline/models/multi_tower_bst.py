"""MultiTowerBST (EasyRec's ``MultiTowerBST``): MultiTower's towers plus BST towers, concatenated, then
``final_dnn`` and one logit.

A BST tower (``bst_towers { input: <sequence group> seq_len multi_head_size }``)
is one transformer layer (``SequenceTransformer``, Chen et al. 2019) over the
first ``seq_len - 1`` positions of the sequence group named ``input`` (a
``feature_groups.sequence_features`` group_name; an EasyRec config's
``model_config.seq_att_groups`` become such groups) and its target (the
group's keys), every position's output flattened, as EasyRec's
``MultiTowerBST.bst``.
"""
from typing import Any, Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.errors import ConfigError
from easyonline.features.feature_spec import sequence_feature_names, sequence_groups
from easyonline.features.sequence_settings import feature_name, validate_sequence_groups
from easyonline.models.sequence_transformer import SequenceTransformer
from easyonline.models.multi_tower import MultiTower
from easyonline.models.base import Embeddings
from easyonline.models.registry import register
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()


@register("multi_tower_bst", "MultiTowerBST")
class MultiTowerBST(MultiTower):
    settings_field = "multi_tower_bst"

    @classmethod
    def validate_settings(cls, config: pipeline_pb2.PipelineConfig, path: str) -> None:
        settings = config.model_config.multi_tower_bst
        if not settings.towers and not settings.bst_towers:
            raise ConfigError(f"{path}.towers", "MultiTowerBST needs at least one tower or bst_tower")
        if settings.towers:
            super().validate_settings(config, path)
        validate_sequence_groups(config)  # (first: the widths below read its features)
        groups = {group.name: group for group in sequence_groups(config.model_config, sequence_feature_names(config))}
        dims = {feature_name(f): f.embedding_dim for f in config.feature_configs}
        for i, tower in enumerate(settings.bst_towers):
            tpath = f"{path}.bst_towers[{i}]"
            if tower.input not in groups:
                raise ConfigError(f"{tpath}.input", f"{tower.input!r} is not a sequence group "
                                  f"(feature_groups.sequence_features group_name: {sorted(groups)})")
            if tower.seq_len < 1:
                raise ConfigError(f"{tpath}.seq_len", "must be at least 1: the target and seq_len - 1 positions "
                                  "of the sequence")
            if tower.multi_head_size < 1:
                raise ConfigError(f"{tpath}.multi_head_size", "must be at least 1")
            group = groups[tower.input]
            if group.aux_hist_seqs:
                raise ConfigError(f"{tpath}.input", f"sequence group {tower.input!r} has aux_hist_seq: a BST tower "
                                  "reads its keys and hist_seqs only (EasyRec's ignores them); read them elsewhere")
            key_width = sum(dims[k] for k in group.keys)
            width = sum(dims[h] for h in group.hist_seqs)
            if key_width != width:
                raise ConfigError(f"{tpath}.input", f"sequence group {tower.input!r}: the keys are {key_width} wide "
                                  f"and the sequences {width}: the target is a position of the sequence, so they "
                                  "must be as wide (allow_key_transform is for target attention only)")
            if width % tower.multi_head_size:
                raise ConfigError(f"{tpath}.multi_head_size", f"{tower.multi_head_size} heads do not divide the "
                                  f"sequence's width {width} (sequence group {tower.input!r}): each head reads "
                                  "width / multi_head_size columns")

    def build_extra_towers(self, settings: pipeline_pb2.MultiTowerBST) -> None:
        self.bst_inputs = [tower.input for tower in settings.bst_towers]
        width = {f.name: self.tables.table_dim(f.table) for f in self.specs.id_features}
        self.bst_towers = []
        for tower in settings.bst_towers:
            self._built_mlps += 1  # (its own seeds, as ``mlp``'s)
            self.bst_towers.append(SequenceTransformer(
                tower.seq_len, tower.multi_head_size, sum(width[h] for h in self.sequence_groups[tower.input].hist_seqs),
                seed=self._seed + 1000 * self._built_mlps, name=f"{tower.input}_bst"))

    def tower_outputs(self, embeddings: Embeddings, dense: Optional[tf.Tensor], training: Any) -> list:
        outputs = super().tower_outputs(embeddings, dense, training)
        for name, tower in zip(self.bst_inputs, self.bst_towers):
            keys, sequence, lengths, _ = self.sequence_input(name, embeddings)
            outputs.append(tower(keys, sequence, lengths))
        return outputs
