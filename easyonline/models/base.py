"""The contract of every model: embed the features, give each task its logits, own the tasks and the loss.

``Model`` is what the trainer, the exporter and the servers see (in the spirit of tensorflow/recommenders'
``models/base.py``): ``call(features) -> {task name: logits}`` always, ``compute_loss(features, labels)`` the
one method a training step calls (labels as a dict by label name, as the parser hands them over), ``tasks``
(tasks/task.py: each task's label, loss, weight, metrics and outputs; one RankingTask on the first label
field unless given) and ``task_outputs`` (what serving returns, under EasyRec's names).

What a subclass builds on: ``embed`` (the dynamic tables' rows of every id feature, first-order weights when
``uses_first_order``, the raw features), ``group_input`` (EasyRec's input layer of a feature group, with the
outputs of its ``sequence_features``' target attentions, built here for every model), ``sequence_input``
(a target attention's parts, as DIN's towers read them) and the seeded layer builders ``mlp`` and
``logit_layer``. It implements ``logits_from(embeddings, first_order, dense, training) -> {task: logits}``,
registers its names (``@register("deepfm", "DeepFM")``, registry.py), checks its own settings in the
classmethod ``validate_settings`` and says whether every id feature must share one embedding dim
(``one_embedding_dim``, checked by the validator).

The two families' bases: ranking_model.py (one logit, the settings' DNN) and multi_task_model.py (task
towers); deepfm_terms.py and final_dnn.py are the parts some models of either family add.
"""
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.embedding.dynamic_tables import DynamicTables
from easyonline.protos.model_towers import towers_in
from easyonline.features.feature_spec import FeatureSpecs, RawFeature, SequenceGroup, sequence_groups
from easyonline.features.multi_value_tf import sequence_lengths
from easyonline.models.feature_groups import group_columns, grouped_features
from easyonline.models.layers import MLP, normalizes
from easyonline.models.target_attention import TargetAttention
from easyonline.protos import pipeline_pb2
from easyonline.tasks import RankingTask, Tasks
from easyonline.tasks.from_config import tasks_from_towers

tf = ensure_legacy_keras()

# EasyRec's attention DNN of a sequence group without seq_dnn
DEFAULT_ATTENTION_UNITS = (128, 64, 32, 1)


class Embeddings(list):
    """``embed``'s deep embeddings ([B, dim] each, in deep feature order), plus what target attention reads:
    ``by_name`` every non-sequence id feature's [B, dim] embedding, ``sequences`` every sequence feature's
    ([B, L, dim] rows, zeros past each sample's length; lengths [B] int64)."""

    def __init__(self, embeddings: Iterable[tf.Tensor], by_name: Dict[str, tf.Tensor],
                 sequences: Dict[str, Tuple[tf.Tensor, tf.Tensor]]) -> None:
        super().__init__(embeddings)
        self.by_name = by_name
        self.sequences = sequences
        self._stacked: Optional[tf.Tensor] = None

    def stacked(self) -> tf.Tensor:
        """[B, F, dim] (one dim for all: DeepFM's FM term), made once however many layers read it."""
        if self._stacked is None:
            self._stacked = tf.stack(self, axis=1)
        return self._stacked

    def flat(self) -> tf.Tensor:
        """[B, sum of dims]: the embeddings side by side (a DNN's input). When they were stacked, a reshape
        of that: concatenating 26 narrow tensors again, and splitting their gradient, was ~5% of DeepFM's
        step (tools/bench/step_profile.py)."""
        if self._stacked is not None:
            return tf.reshape(self._stacked, [-1, len(self) * int(self._stacked.shape[2])])
        return tf.concat(self, axis=1)


class SequenceInput(NamedTuple):
    """A target attention's input: ``keys`` [B, Dk] (its keys concatenated), ``sequence`` [B, L, D] (its hist_seqs
    concatenated along dim, zeros past ``lengths``), ``lengths`` [B] (the first hist_seq's), ``aux`` [B, L, Da]
    (its aux_hist_seqs) or None."""
    keys: tf.Tensor
    sequence: tf.Tensor
    lengths: tf.Tensor
    aux: Optional[tf.Tensor]


class Model(tf.keras.Model):
    """Keras model: ``call(features) -> {task name: logits}`` (logits [B], or [B, 2] for a JRC_LOSS task)."""

    uses_first_order = False
    one_embedding_dim = False

    @classmethod
    def task_towers(cls, settings: Any) -> list:
        """The task towers in the model's settings (``model_config.<field>``, or None), in field order
        (protos/model_towers.py ``towers_in``): tasks/from_config.py builds one task per tower; a
        single-task model's settings have none."""
        return towers_in(settings) if settings is not None else []

    @classmethod
    def tasks_from_settings(cls, settings: Any, label_fields: Sequence[str], window_samples: int, path: str) -> list:
        """The model's tasks from its settings (``path``: their config field, ``model_config.<field>``): one per
        task tower; none for a single-task model (``model_config.loss_type`` then gives its one task). A
        model whose objectives are not one per tower (ESMM) overrides this."""
        towers = cls.task_towers(settings)
        return tasks_from_towers(towers, label_fields, window_samples, f"{path}.task_towers") if towers else []

    @classmethod
    def validate_settings(cls, config: pipeline_pb2.PipelineConfig, path: str) -> None:
        """Raises ConfigError naming the field when the model's own settings (``path``: ``model_config.<field>``)
        are wrong; ``config/validate.py`` calls it (and checks every DNN in them) for whichever model is chosen."""

    def __init__(self, specs: FeatureSpecs, model_config: pipeline_pb2.ModelConfig, dnn: pipeline_pb2.DNN,
                 seed: int = 0, tasks: Optional[Tasks] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        del dnn  # (the settings' own DNN: a single-task model's, ranking_model.py)
        self.specs = specs
        self.tasks = tasks or Tasks([RankingTask(label_name=specs.label_names[0] if specs.label_names else "label")])
        self.wide_dim = self.first_order_dim(model_config)
        self.tables = DynamicTables(specs, extra_dims=self.wide_dim, seed=seed, name="tables")
        self._deep_ids, self._wide_ids, self._deep_dense, self._wide_dense = grouped_features(specs, model_config)
        self._embedding_l2 = model_config.embedding_regularization
        self.dropout_ratio = 0.0  # the largest of the model's layers' (``mlp`` raises them)
        self.use_bn = False
        self._groups = group_columns(specs, model_config, self._deep_ids)
        self._seed = seed
        self._built_mlps = 0
        groups = sequence_groups(model_config, [f.name for f in specs.id_features if f.sequence])
        self.sequence_groups: Dict[str, SequenceGroup] = {g.name: g for g in groups}
        self._sequence_members = {g.group_name: [s.name for s in groups if s.feature_group == g.group_name
                                                 and not s.backbone] for g in model_config.feature_groups}
        default_dnn, normalizer = self.attention_defaults(model_config)
        self.attentions: Dict[str, TargetAttention] = {
            group.name: self.target_attention(group, group.config.seq_dnn if group.config.HasField("seq_dnn")
                                              else default_dnn, normalizer, group.config.need_key_feature,
                                              model_config.l2_regularization, f"seq_dnn{group.name}")
            for group in self.sequence_groups.values() if not group.backbone}  # (a backbone's: its DIN/BST layers)

    def attention_defaults(self, model_config: pipeline_pb2.ModelConfig) -> Tuple[pipeline_pb2.DNN, str]:
        """(attention DNN, normalizer) of the sequence groups without seq_dnn: EasyRec's [128, 64, 32, 1] and
        softmax (DIN's settings override them)."""
        del model_config
        return pipeline_pb2.DNN(hidden_units=DEFAULT_ATTENTION_UNITS), "softmax"

    def target_attention(self, group: SequenceGroup, dnn: pipeline_pb2.DNN, normalizer: str, need_key: bool,
                         l2: float, name: str) -> TargetAttention:
        """The target attention of ``group`` with ``dnn`` (its last layer: the one linear score unit)."""
        width = {f.name: self.tables.table_dim(f.table) for f in self.specs.id_features}
        key_width = sum(width[k] for k in group.keys)
        seq_width = sum(width[h] for h in group.hist_seqs)
        transform = ""
        if key_width != seq_width:  # (the validator allows it with allow_key_transform only)
            transform = "pad" if key_width < seq_width and not group.config.transform_dnn else "dense"
        hidden = pipeline_pb2.DNN()
        hidden.CopyFrom(dnn)
        del hidden.hidden_units[-1]
        return TargetAttention(self.mlp(hidden, l2, f"{name}_hidden"), self.logit_layer(l2, f"{name}_score"),
                               normalizer, need_key, key_width, seq_width,
                               sum(width[a] for a in group.aux_hist_seqs), transform, name=name)

    def first_order_dim(self, model_config: pipeline_pb2.ModelConfig) -> int:  # pylint: disable=unused-argument
        """Width of each id's first-order weights (stored as extra columns of its row); 0: none."""
        return 1 if self.uses_first_order else 0

    @property
    def deep_dense_columns(self) -> Optional[List[int]]:
        """The raw features' columns the deep part reads (None: all; model_config.feature_groups choose)."""
        return self._deep_dense

    @property
    def wide_dense_columns(self) -> Optional[List[int]]:
        """The raw features' columns the wide part reads (None: all)."""
        return self._wide_dense

    @property
    def scores_differ_in_training(self) -> bool:
        """True when training=True changes the forward pass (dropout, batch norm)."""
        return self.dropout_ratio > 0 or self.use_bn

    def embed(self, features: Dict[str, tf.Tensor], training: Any = False, labels: Optional[tf.Tensor] = None,
              now: Optional[tf.Tensor] = None) -> Tuple[Embeddings, Optional[tf.Tensor], Optional[tf.Tensor]]:
        """Returns (embeddings [B, dim] per deep id feature, first-order weights [B, F] (or [B, F, wide_dim])
        of the wide ones or None, dense [B, R] or None).

        ``labels`` and ``now`` (seconds since STATS_EPOCH) feed the per-id statistics in training.
        """
        rows = self.tables(features, training=training, labels=labels, now=now)
        deep: List[tf.Tensor] = []
        by_name: Dict[str, tf.Tensor] = {}
        sequences: Dict[str, Tuple[tf.Tensor, tf.Tensor]] = {}
        first_order = []
        for i, feature in enumerate(self.specs.id_features):
            row = rows[feature.name]
            dim = self.tables.table_dim(feature.table)
            if feature.sequence:
                sequences[feature.name] = (row[:, :, :dim] if self.wide_dim else row,
                                           sequence_lengths(feature, features))
                continue
            # One split, not two slices: each slice's gradient is a zero tensor of the whole row plus an
            # AddN of the two (51 of them were 6.7% of DeepFM's step, tools/bench/step_profile.py).
            embedding, wide = tf.split(row, [dim, self.wide_dim], axis=1) if self.wide_dim else (row, None)
            by_name[feature.name] = tf.reshape(embedding, [-1, dim])  # a static width: layers built on a
            if i in self._deep_ids:                                   # group's input need its last dim
                deep.append(by_name[feature.name])
            if wide is not None and i in self._wide_ids:
                first_order.append(tf.reshape(wide, [-1]) if self.wide_dim == 1 else wide)
        embeddings = Embeddings(deep, by_name, sequences)
        if self._embedding_l2 > 0:
            self.add_loss(self._embedding_l2 * tf.add_n(
                [tf.reduce_mean(tf.reduce_sum(tf.square(e), 1)) for e in embeddings]
                + [tf.reduce_mean(tf.reduce_sum(tf.square(rows), [1, 2])) for rows, _ in sequences.values()]))
        dense: Optional[tf.Tensor] = None
        if self.specs.raw_features:  # [B, dense_width]: a number is one column, a vector raw feature dim
            dense = tf.reshape(tf.concat([tf.reshape(_scaled(tf.cast(features[f.name], tf.float32), f), [-1, f.dim])
                                          for f in self.specs.raw_features], axis=1), [-1, self.specs.dense_width])
        return embeddings, (tf.stack(first_order, axis=1) if first_order else None), dense

    def mlp(self, dnn: pipeline_pb2.DNN, l2: float, name: str) -> MLP:
        """An MLP of ``dnn`` (its own seeds: two towers of the same DNN start apart); its dropout and batch
        norm count in ``scores_differ_in_training``."""
        self._built_mlps += 1
        self.dropout_ratio = max(self.dropout_ratio, dnn.dropout_ratio)
        self.use_bn = self.use_bn or normalizes(dnn)
        return MLP(list(dnn.hidden_units), dnn.activation, dnn.dropout_ratio, dnn.use_bn, l2,
                   seed=self._seed + 1000 * self._built_mlps, name=name)

    def logit_layer(self, l2: float, name: str, units: int = 1) -> Any:
        """A Dense layer of ``units`` (a task's logit; 2: a JRC_LOSS task's two classes), seeded like ``mlp``."""
        self._built_mlps += 1
        return tf.keras.layers.Dense(units, kernel_regularizer=tf.keras.regularizers.l2(l2) if l2 > 0 else None,
                                     kernel_initializer=tf.keras.initializers.GlorotUniform(
                                         seed=self._seed + 1000 * self._built_mlps), name=name)

    def group_input(self, group: str, embeddings: List[tf.Tensor], dense: Optional[tf.Tensor],
                    training: Any = False) -> tf.Tensor:
        """The input of feature group ``group`` [B, width] (EasyRec's input layer of a group): its id features'
        embeddings then its raw features, in the group's order, then the output of each of its
        sequence_features' target attentions. ``all`` without a group of that name is every deep feature and
        every target attention. ``embeddings`` and ``dense`` are what ``embed`` returned."""
        positions, columns = self._groups[group]
        parts = [embeddings[p] for p in positions]
        if dense is not None and (columns is None or columns):
            parts.append(dense if columns is None else tf.gather(dense, columns, axis=1))
        # a static width (batch norm and the experts build their weights from it), whatever the traced
        # signature (export's or the training step's) left unknown
        width = sum(self.tables.table_dim(f.table) for f in self._deep_features(positions))
        if dense is not None and (columns is None or columns):
            width += self.specs.dense_width if columns is None else len(columns)
        attentions = self._sequence_members.get(group, list(self.attentions) if group == "all" else [])
        for name in attentions:
            parts.append(self.attentions[name](*self.sequence_input(name, embeddings), training=training))
            width += self.attentions[name].output_width
        return tf.reshape(tf.concat(parts, axis=1), [-1, width])

    def sequence_input(self, name: str, embeddings: List[tf.Tensor]) -> SequenceInput:
        """The parts of target attention ``name`` (a sequence_features group_name): keys [B, Dk] (None: none, a
        backbone's BST input may have none), sequence
        [B, L, D], lengths [B], aux [B, L, Da] or None; ``embeddings`` is what ``embed`` returned."""
        if not isinstance(embeddings, Embeddings):
            raise TypeError("sequence_input reads what embed returned")
        group = self.sequence_groups[name]
        keys = tf.concat([embeddings.by_name[k] for k in group.keys], axis=1) if group.keys else None
        sequences = [embeddings.sequences[h][0] for h in group.sequences]
        length = tf.reduce_max(tf.stack([tf.shape(s)[1] for s in sequences]))  # (as long in a parsed batch)
        padded = [tf.pad(s, [[0, 0], [0, length - tf.shape(s)[1]], [0, 0]]) for s in sequences]
        hist = len(group.hist_seqs)
        aux = tf.concat(padded[hist:], axis=2) if len(padded) > hist else None
        return SequenceInput(keys, tf.concat(padded[:hist], axis=2), embeddings.sequences[group.hist_seqs[0]][1], aux)

    def _deep_features(self, positions: Sequence[int]) -> list:
        """The id features at ``positions`` of ``embed``'s embeddings list (the deep ids, in spec order)."""
        deep = [self.specs.id_features[i] for i in sorted(self._deep_ids)]
        return [deep[p] for p in positions]

    def logits_from(self, embeddings: Embeddings, first_order: Optional[tf.Tensor], dense: Optional[tf.Tensor],
                    training: Any) -> Dict[str, tf.Tensor]:
        """{task name: logits} of a batch from what ``embed`` returned (the model's own network)."""
        raise NotImplementedError

    def compute_loss(self, features: Dict[str, tf.Tensor], labels: Dict[str, tf.Tensor], training: bool = True,
                     now: Optional[tf.Tensor] = None,
                     sample_weight: Optional[tf.Tensor] = None) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
        """(loss, logits by task name) of a batch: every task's weighted loss on its label, plus the
        regularization losses.

        ``labels`` maps label names to [B] tensors (each task's ``label_name`` must be there); the primary
        task's label also feeds the id statistics (clicks) when training. ``sample_weight`` [B] weighs
        each sample in the loss of every task that uses it; ``features`` also give the losses over sessions
        their session ids.
        """
        by_task = self(features, training=training, labels=labels[self.tasks.primary.label_name], now=now)
        targets = self.tasks.targets(labels)
        losses = []
        for task in self.tasks:
            if task.weight == 0:  # an output only (ESMM's CVR: learnt through the CTCVR task)
                continue
            loss = task.loss(targets[task.name], by_task[task.name], sample_weight, features)
            losses.append(loss if task.weight == 1.0 else task.weight * loss)
        regularization = self.losses
        total = losses[0] if len(losses) == 1 else tf.add_n(losses)
        if regularization:
            total += tf.add_n(list(regularization))
        return total, by_task

    def task_outputs(self, by_task: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        """Every task's prediction outputs under EasyRec's names (``probs``/``logits``/``y`` for one task,
        ``probs_<tower>``/``logits_<tower>``/``y_<tower>`` for several), from what ``call`` returned: what
        serving returns."""
        named: Dict[str, tf.Tensor] = {}
        for task in self.tasks:
            named.update(task.outputs(by_task[task.name], self.tasks.output_suffix(task)))
        return named

    def call(self, features: Dict[str, tf.Tensor], training: Any = False, labels: Optional[tf.Tensor] = None,
             now: Optional[tf.Tensor] = None) -> Dict[str, tf.Tensor]:
        """{task name: logits}: ``labels`` (the primary task's) and ``now`` feed the id statistics in training."""
        embeddings, first_order, dense = self.embed(features, training, labels, now)
        return self.logits_from(embeddings, first_order, dense, training)


def one_or_all(logits: tf.Tensor) -> tf.Tensor:
    """A logit layer's output as a task's logits: [B] of one unit, [B, units] of more (a JRC_LOSS task's)."""
    return logits[:, 0] if logits.shape[-1] == 1 else logits


def _scaled(value: tf.Tensor, feature: RawFeature) -> tf.Tensor:
    """EasyRec's min_val / max_val scaling of a raw feature, when set."""
    if feature.max_val > feature.min_val:
        return (value - feature.min_val) / (feature.max_val - feature.min_val)
    return value
