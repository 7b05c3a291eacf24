"""The training step of one cluster trainer, as a TensorFlow graph (between-graph replication).

Every trainer builds its own copy of this graph and runs it in its own
session, concurrently with the others, as TF1 parameter-server jobs do
(EasyRec's, and TFRA's own demos). ``replica_device_setter`` puts the dense
variables on the ps; the embedding tables live on the ps too (whole tables
spread over them, or split by key); each lookup makes a TrainableWrapper
named for this trainer (on the table's ps, with its optimizer update, when
the table lives whole on one), so concurrent steps never share a buffer. One
``session.run`` scores the batch, trains on it, and then, once the
updates are applied, moves the batch's partitions forward in the shared
positions and adds its figures to the shared metrics (shared_state.py).

The model is the same Keras model as in a single process; only its tables
take the graph-mode path (``embedding.dynamic_tables.GraphEmbedding``), and
its checkpoint names the tables' parameters as the single process does.
"""
import collections
import functools
import logging
from typing import Dict, List

import numpy as np

from easyonline.checkpoint.positions import StreamPositions
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.distributed.cluster_config import ClusterConfig
from easyonline.distributed.session_tables import TableAccess
from easyonline.distributed.shared_state import ClusterState
from easyonline.embedding.dynamic_tables import PsPlacement, ps_shards
from easyonline.features.feature_spec import FeatureSpecs
from easyonline.features.signature import feature_signature
from easyonline.models.builder import build_model, model_tasks
from easyonline.protos import pipeline_pb2
from easyonline.train.optimizers import build_train_optimizer

tf = ensure_legacy_keras()
from tensorflow_recommenders_addons import dynamic_embedding as de  # pylint: disable=g-import-not-at-top
from tensorflow.python.autograph.core import ag_ctx  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import

log = logging.getLogger(__name__)


def _place_table_updates_with_their_buffers(graph: tf.Graph, tables) -> None:
    """Puts each table's optimizer update on the ps that holds the table's lookup buffer.

    TFRA builds a TrainableWrapper's update with the device scope cleared, so
    its reads, its Adam arithmetic and the inputs of its table writes would
    run on this trainer: each buffer and slot would cross the network to the
    trainer and back. The update's ops share a name scope; those left without
    a device go where the buffer is.
    """
    scopes = {f"/update_{wrapper.op.name}/": wrapper.device for table in tables
              for wrapper in getattr(table, "wrappers", []) if wrapper.device.startswith("/job:ps")}
    if not scopes:
        return
    for op in graph.get_operations():
        if op.device:
            continue
        for scope, device in scopes.items():
            if scope in op.name:
                op._set_device(device)  # pylint: disable=protected-access
                break


def _changed_keys_table(table):
    """A key set (rows of one unused float) beside ``table``, on the same ps: not checkpointed."""
    return de.get_variable(table.params.name + "-changed", key_dtype=tf.int64, value_dtype=tf.float32, dim=1,
                           devices=table.params.devices, initializer=0.0, trainable=False)


def _record_keys(changed, ids: tf.Tensor, applied: tf.Operation) -> tf.Operation:
    """Adds ``ids`` to the key set once the step's update ``applied`` ran, computed where the ids are (a whole
    table's ps). Recorded before it, a key could be drained and its row read before the update wrote it: the
    update would reach no message, and a checkpoint saved in between would lack it too."""
    with tf.device(ids.device), tf.control_dependencies([applied]):
        return changed.upsert(ids, tf.zeros([tf.size(ids), 1]))


def _drain(changed) -> tf.Tensor:
    """The keys in ``changed``, removed once read. A key a step adds after the read is kept for the
    next drain; one it adds between the read and the removal is published anyway, since the rows
    are read after the drain (and a key is added once its row is written: ``_record_keys``)."""
    keys, _ = changed.export()
    with tf.control_dependencies([changed.remove(keys)]):
        return tf.identity(keys)


def op_task(op: tf.Operation, own_device: str) -> str:
    """The task an op runs on: its device's, else a resource's it uses, else this trainer's (``own_device``)."""
    device = op.device or next((t.op.device for t in op.inputs if t.dtype == tf.resource and t.op.device), "")
    return (device or own_device).split("/device:")[0]


def cross_task_tensors(fetches, own_device: str) -> Dict[str, int]:
    """How many tensors a run of ``fetches`` sends between tasks, by receiving task.

    An op's task is its device's, else (placed by TensorFlow) the task of a
    resource it uses (resource ops run where the resource lives), else this
    trainer's. Resource handles themselves are not counted (no data moves).
    """
    task = functools.partial(op_task, own_device=own_device)
    ops, stack = set(), [t.op if isinstance(t, tf.Tensor) else t for t in tf.nest.flatten(fetches)]
    while stack:
        op = stack.pop()
        if op not in ops:
            ops.add(op)
            stack.extend(t.op for t in op.inputs)
            stack.extend(op.control_inputs)
    crossing = {(t.name, task(op)) for op in ops for t in op.inputs
                if t.dtype != tf.resource and task(t.op) != task(op)}
    return dict(collections.Counter(receiver for _, receiver in crossing))


class TrainGraph:
    """The graph, its placeholders and ops; ``feed`` turns a parsed batch into a feed dict."""

    def __init__(self, config: pipeline_pb2.PipelineConfig, specs: FeatureSpecs, cluster: ClusterConfig):
        v1 = tf.compat.v1
        self.graph = tf.Graph()
        spec = tf.train.ClusterSpec({role: tasks for role, tasks in cluster.cluster.items() if tasks})
        setter = v1.train.replica_device_setter(cluster=spec, worker_device=cluster.device)
        # autograph off, as in the single process's steps (eager_engine.py: tf.function(autograph=False)):
        # the model has no tensor-dependent Python control flow, and Keras converting the model's, the
        # losses' and TFRA's code (~370 functions) was most of a trainer's start: ~20 s CPU per trainer
        # of a small DNN, ~40 s per 2-ps 2-trainer test cluster
        with self.graph.as_default(), v1.device(setter), ag_ctx.ControlStatusCtx(status=ag_ctx.Status.DISABLED):
            tasks = model_tasks(config, specs)
            self.state = ClusterState(cluster.num_trainers, [(task.name, task.kind) for task in tasks])
            self._feature_feeds: List = []  # (name, values placeholder, row_splits placeholder or None)
            features = {}
            for name, signature in feature_signature(specs).items():
                shape = [None] if isinstance(signature, tf.RaggedTensorSpec) else signature.shape  # [B, dim]: a vector
                values = v1.placeholder(signature.dtype, shape, name=f"in_{name}")
                if isinstance(signature, tf.RaggedTensorSpec):
                    splits = v1.placeholder(tf.int64, [None], name=f"in_{name}_splits")
                    features[name] = tf.RaggedTensor.from_row_splits(values, splits, validate=False)
                else:
                    splits = None
                    features[name] = values
                self._feature_feeds.append((name, values, splits))
            self.now = v1.placeholder(tf.float64, [], name="now")
            # several trainers update the same rows concurrently: updates add their deltas (TFRA's bp_v2)
            accumulate = cluster.num_trainers > 1
            with ps_shards(PsPlacement(cluster.ps_devices, config.train_config.ps_shard_tables_by_key,
                                       cluster.trainer_index, accumulate)):
                self.model = build_model(config, specs)
            # one placeholder per label the model's tasks learn from, by label name (the first: "labels")
            self.label_names = self.model.tasks.label_names
            self.label_feeds = {name: v1.placeholder(tf.float32, [None], name="labels" if i == 0 else f"labels_{i}")
                                for i, name in enumerate(self.label_names)}
            self.labels = self.label_feeds[self.model.tasks.primary.label_name]
            self.optimizer = build_train_optimizer(config.train_config, accumulate=accumulate)
            # several trainers apply to the same dense variables and slots on the ps: lock each apply
            self.optimizer._use_locking = accumulate  # pylint: disable=protected-access
            # data_config.sample_weight: each sample's weight in the loss, fed with the batch
            self.sample_weight = v1.placeholder(tf.float32, [None], name="sample_weight") \
                if specs.sample_weight else None
            loss, logits = self.model.compute_loss(features, self.label_feeds, training=True, now=self.now,
                                                   sample_weight=self.sample_weight)
            score_logits = logits
            if self.model.scores_differ_in_training:  # dropout or batch norm: score as in serving, first
                score_logits = self.model(features, training=False)
            primary = self.model.tasks.primary
            # every task's predictions (a binary task's probabilities), for the shared metrics
            self.predictions = {task.name: task.scores(score_logits[task.name]) for task in self.model.tasks}
            self.probabilities = self.predictions[primary.name]
            variables = self.model.trainable_variables
            gradients = tf.gradients(loss, variables)
            # TFRA names a table's slot buffers ("m/m", ...) from the variable scope; on a ps, this
            # trainer's must not be another trainer's
            with tf.control_dependencies(list(self.predictions.values())), \
                    v1.variable_scope(f"trainer{cluster.trainer_index}", auxiliary_name_scope=False):
                # (no aggregation: between-graph replicas have nothing to aggregate, and its IdentityN
                # would bring every table's gradient from its ps to this trainer and back)
                apply = self.optimizer.apply_gradients(zip(gradients, variables),
                                                       experimental_aggregate_gradients=False)
            _place_table_updates_with_their_buffers(self.graph, self.model.tables.embeddings.values())
            train = config.train_config
            self.publishes = train.HasField("incr_save_config") or train.HasField("inference_save_config")
            # every trainer's trained keys, per table on the table's ps, for the chief to publish
            self.changed_keys = {name: _changed_keys_table(table) for name, table in
                                 self.model.tables.embeddings.items()} if self.publishes else {}
            updates = [apply, *self.model.tables.graph_updates, *self.model.get_updates_for(None),
                       *self.model.get_updates_for(features),
                       *[_record_keys(changed, wrapper.ids, apply) for name, changed in self.changed_keys.items()
                         for wrapper in self.model.tables.embeddings[name].wrappers]]
            self.parameter_updates = updates
            # each task's target (ESMM's CTCVR: conversion x click), as the loss and a single process score it
            shared = self.state.step_updates(self.model.tasks.targets(self.label_feeds), self.predictions,
                                             cluster.trainer_index, after=updates)
            with tf.control_dependencies([shared]):
                # read after this step's own increments: the cluster's step and samples so far
                self.train_op = {"probabilities": tf.identity(self.probabilities),
                                 "step": self.state.global_step.read_value(),
                                 "samples": self.state.samples.read_value(),
                                 "pause": self.state.pause.read_value()}  # the chief's save (save_pause.py)
            self.begin_step = self.state.begin_step(cluster.trainer_index)
            self.table_sizes = {name: layer.params.size() for name, layer in self.model.tables.embeddings.items()}
            with v1.device(cluster.device):  # the chief's copy of the positions it checkpoints
                self.positions = StreamPositions()  # (the single process's own; bound to the session later)
            self.table_access = TableAccess(self.model.tables)
            self.drain_changed_keys = {name: _drain(changed) for name, changed in self.changed_keys.items()}
            self.global_variables = [v for v in self.graph.get_collection(v1.GraphKeys.GLOBAL_VARIABLES)
                                     if v.device.startswith("/job:ps")]
            # this trainer's own: its variables, and its lookup buffers (local variables, on a ps or not)
            local = [v for v in self.graph.get_collection(v1.GraphKeys.GLOBAL_VARIABLES)
                     if not v.device.startswith("/job:ps")] + self.graph.get_collection(v1.GraphKeys.LOCAL_VARIABLES)
            self.global_init = v1.variables_initializer(self.global_variables)
            self.local_init = v1.variables_initializer(local)
            self.uninitialized = v1.report_uninitialized_variables(self.global_variables)
        self.transfers = cross_task_tensors(self.train_op, cluster.device)
        log.info("training graph: %d variables on the ps, %d tables %s; a step sends %d tensors to the ps "
                 "and receives %d", len(self.global_variables), len(self.table_sizes),
                 "split by key over every ps" if config.train_config.ps_shard_tables_by_key else "each whole on one ps",
                 sum(n for task, n in self.transfers.items() if task.startswith("/job:ps")),
                 self.transfers.get(cluster.device, 0))

    def feed(self, features, labels, now: float, positions: Dict[int, int], lag: int,
             sample_weight=None) -> dict:
        """The feed dict of one parsed batch (eager tensors or numpy) and the positions after it.

        ``labels``: {label name: [B]} with every label of ``label_names``, or the [B] of the first.
        ``sample_weight``: the batch's [B] weights (required when data_config.sample_weight names a field).
        """
        if not isinstance(labels, dict):
            labels = {self.label_names[0]: labels}
        feed = {self.now: now,
                self.state.partitions_in: np.fromiter(positions.keys(), np.int64, len(positions)),
                self.state.offsets_in: np.fromiter(positions.values(), np.int64, len(positions)),
                self.state.lag_in: lag}
        for name, placeholder in self.label_feeds.items():
            feed[placeholder] = np.asarray(labels[name], np.float32)
        if self.sample_weight is not None:
            if sample_weight is None:
                raise ValueError("data_config.sample_weight is set but the batch has no sample weights")
            feed[self.sample_weight] = np.asarray(sample_weight, np.float32)
        for name, values, splits in self._feature_feeds:
            value = features[name]
            if splits is not None:
                feed[values] = np.asarray(value.flat_values)
                feed[splits] = np.asarray(value.row_splits, np.int64)
            else:
                feed[values] = np.asarray(value)
        return feed
