"""One TFRA dynamic table per embedding name, and the lookup of every id feature.

Tables start empty and grow as ids are trained on: no vocabulary and no
``num_embeddings``. Models that need a first-order (wide) weight per id ask
for ``extra_dims=1``: the weight is stored as one more column of the same
row, so one lookup and one sparse optimizer update serve both.

Tables with an admission or eviction policy also keep per-id statistics
(show, click, last seen) in a second table beside it. In training, only
admitted ids are looked up through the trainable layer, so the others get
no row and no optimizer slot; they, unknown ids outside training, and
padding ids (negative) look up as zeros.
"""
import contextlib
import dataclasses
import re
from typing import Dict, List, Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.embedding.admission import admits
from easyonline.embedding.rows_with_state import keep_state_in_rows, row_part, row_width, rows_of, state_width, \
    stored_width
from easyonline.features.feature_spec import FeatureSpecs, TableSpec, positions_key, weights_key

tf = ensure_legacy_keras()
from tensorflow.python.ops import variable_scope  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
from tensorflow.python.trackable import data_structures  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
from tensorflow_recommenders_addons import dynamic_embedding as de  # pylint: disable=g-import-not-at-top


def _shadow_saveables(shadow) -> dict:
    """What a checkpoint saves of a TFRA ShadowVariable (the rows of the last batch a table lookup read, one per
    table and per optimizer slot): nothing. TFRA's own method empties its ids and looks them up again to save
    an empty array, 3 lookups per table: half of a 26-table DeepFM's save (~0.35 of 0.65 s at 15k rows),
    for 78 empty arrays that nothing restores. Checkpoints that hold them still restore (expect_partial)."""
    del shadow
    return {}


de.shadow_ops.ShadowVariable._gather_saveables_for_checkpoint = _shadow_saveables  # pylint: disable=protected-access


def draw_rows_for_new_ids_only(variable) -> None:
    """Makes ``variable`` (a TFRA table in one place, with a random initializer) draw initial rows for the ids
    it does not hold yet, not for every id it looks up.

    TFRA's lookup draws a random row for each id and lets the find keep those of the missing ids: in a
    running stream almost every id is known, and the draws were 8% of DeepFM's step
    (tools/bench/step_profile.py). Here the find fills missing ids with zeros, and only those rows are drawn
    and written in. New rows come from the same initializer (other draws than before, the same distribution).
    A table split over several places keeps TFRA's lookup.
    """
    if variable.initializer is None or len(variable.devices) != 1:
        return
    table, dim, dtype, initializer = variable._tables[0], variable.dim, variable.value_dtype, variable.initializer  # pylint: disable=protected-access
    drawn_width = state_width(variable) or dim  # (a row that keeps Adam's state starts with zeros there)

    def lookup(keys, return_exists=False, name=None):
        with tf.device(variable.devices[0]):
            flat = tf.reshape(keys, [-1])
            values, exists = table.lookup(flat, dynamic_default_values=tf.zeros([dim], dtype), return_exists=True,
                                          name=name)
            new = tf.where(tf.logical_not(exists))
            drawn = tf.cast(initializer(tf.stack([tf.shape(new, out_type=tf.int32)[0], drawn_width])), dtype)
            if drawn_width != dim:
                drawn = tf.pad(drawn, [[0, 0], [0, dim - drawn_width]])
            values = tf.reshape(tf.tensor_scatter_nd_update(values, new, drawn),
                                tf.concat([tf.shape(keys), [dim]], 0))
        return (values, tf.reshape(exists, tf.shape(keys))) if return_exists else values

    variable.lookup = lookup


# Statistics columns; last_seen is stored as seconds since STATS_EPOCH (float32 keeps ~2 s resolution).
SHOW, CLICK, LAST_SEEN = 0, 1, 2
STATS_EPOCH = 1.7e9


@dataclasses.dataclass(frozen=True)
class PsPlacement:
    """Where the tables of a between-graph cluster's trainer live, and how its updates reach them.

    ``devices``: the ps tasks. ``by_key``: split every table over all of
    them by key, else each table whole on one (round-robin). ``trainer``:
    this trainer's index (its lookup buffers on a ps are its own).
    ``accumulate``: updates add their delta to the table (TFRA's ``bp_v2``)
    instead of overwriting the row, so that concurrent trainers' updates of
    the same id all count.
    """

    devices: List[str]
    by_key: bool = False
    trainer: int = 0
    accumulate: bool = False


_local_shards = [1]
# Rows per table (by ``table_variable_name``) the tables built now are sized for, innermost last.
_capacities: List[Dict[str, int]] = [{}]
# The between-graph cluster being built, innermost last.
_cluster_devices: List[PsPlacement] = []
_SHARD = re.compile(r"/tables_of_(.+)-parameter/(\d+)/\.ATTRIBUTES/table-keys$")


def shard_devices() -> Optional[List[str]]:
    """Where a table's shards live; keys go to shard ``id mod len(devices)``.

    Inside ``ps_shards``: the cluster's ps tasks. Otherwise one table in this
    process, or, inside ``local_shards(n)``, n shards in this process (to load
    a checkpoint written with n shards for export or evaluation).
    """
    if _cluster_devices:
        return _cluster_devices[-1].devices
    if _local_shards[-1] > 1:
        return ["/device:CPU:0"] * _local_shards[-1]
    return None


@contextlib.contextmanager
def local_shards(count: int):
    """Tables built inside have ``count`` shards in this process, like a checkpoint written by ``count`` ps."""
    _local_shards.append(max(count, 1))
    try:
        yield
    finally:
        _local_shards.pop()


@contextlib.contextmanager
def ps_shards(placement: PsPlacement):
    """Tables built inside live on the ps, as ``placement`` says."""
    _cluster_devices.append(placement)
    try:
        yield
    finally:
        _cluster_devices.pop()


@contextlib.contextmanager
def table_capacities(rows: Dict[str, int]):
    """Tables built inside start with room for ``rows[table_variable_name(table)]`` rows (a checkpoint's
    ``checkpoint_tables(...).rows``), their optimizer slots too.

    A TFRA table starts small and doubles as rows arrive: a restore of 20M rows
    went through its doublings, each a rehash holding the old and the new
    table, 2.2x slower and 1.3 GiB higher at its peak than into a table sized
    for its rows (docs/benchmarks.md, "Tables as they grow"). A table that
    grows past its size later still doubles as before. Nested, the inner rows
    add to (and for the same table, replace) the outer ones.
    """
    _capacities.append({**_capacities[-1], **rows})
    try:
        yield
    finally:
        _capacities.pop()


@dataclasses.dataclass(frozen=True)
class CheckpointTables:
    """What a checkpoint's index says of its tables. ``shards``: per table (the number of ps that wrote it; 1
    for a single process). ``rows``: per table (by ``table_variable_name``), its shards together."""

    shards: int
    rows: Dict[str, int]


def checkpoint_tables(path: str) -> CheckpointTables:
    """The shards and rows of a checkpoint's tables, from one read of its index (a model is built to match)."""
    shards = 1
    rows: Dict[str, int] = {}
    for name, shape in tf.train.load_checkpoint(path).get_variable_to_shape_map().items():
        match = _SHARD.search(name)
        if match:
            shards = max(shards, int(match.group(2)) + 1)
            rows[match.group(1)] = rows.get(match.group(1), 0) + (int(shape[0]) if shape else 0)
    return CheckpointTables(shards, rows)


def table_variable_name(table: str) -> str:
    """TFRA names must be valid op names; the config's names may not be."""
    return "emb_" + re.sub(r"[^A-Za-z0-9_.\-]", "_", table)


class GraphEmbedding(tf.Module):
    """A table for graph-mode (between-graph) training, where TFRA's Keras layer cannot run.

    TFRA's ``ShadowVariable`` is eager-only; in a graph, each lookup goes
    through ``de.embedding_lookup``, which makes a TrainableWrapper (a
    buffer of the batch's rows) named for this trainer, so concurrent
    trainers never share one. The parameters are tracked as ``params``, like
    the Keras layer's, so a checkpoint's table keys are named the same in
    both modes.
    """

    def __init__(self, embedding_size: int, initializer, devices: Optional[List[str]], name: str,
                 placement: PsPlacement, capacity: int = 0):
        super().__init__(name=name)
        self.embedding_size = embedding_size
        self.trainer = placement.trainer
        self.params = de.get_variable(name + "-parameter", key_dtype=tf.int64, value_dtype=tf.float32,
                                      dim=embedding_size, devices=devices, initializer=initializer,
                                      bp_v2=placement.accumulate, short_file_name=True, init_size=capacity)
        # The TrainableWrappers of this graph's lookups (their optimizer slots hang off them). Not
        # checkpointed: reading one needs its batch.
        self.wrappers: List = data_structures.NoDependency([])

    @property
    def ps_device(self) -> Optional[str]:
        """The ps holding this whole table, or None (split by key, or in this process)."""
        devices = self.params.devices
        return devices[0] if len(devices) == 1 and devices[0].startswith("/job:ps") else None

    def __call__(self, ids):
        if self.ps_device is None:
            values, wrapper = de.embedding_lookup_unique(self.params, ids, name=f"{self.name}-lookup-t{self.trainer}",
                                                         return_trainable=True)
            self.wrappers.append(wrapper)
            return values
        return lookup_together([self], [ids])[0]

    def lookup_on_ps(self, unique_ids):
        """The rows of ``unique_ids`` (a tensor on the table's ps), through a lookup buffer there.

        The buffer, its optimizer slots and their update live on the ps too, so
        a step sends the rows and their gradient once, not the rows and every
        slot both ways.
        """
        rows, wrapper = de.embedding_lookup(self.params, unique_ids, name=f"{self.name}-lookup-t{self.trainer}",
                                            return_trainable=True)
        self.wrappers.append(wrapper)
        return rows

    @property
    def optimizer_vars(self) -> List:
        """The optimizer's slot tables of this table (TFRA keeps them on each wrapper)."""
        return [slot for wrapper in self.wrappers for slot in getattr(wrapper, "_optimizer_vars").value]


def lookup_together(layers: List, ids: List[tf.Tensor]) -> List[tf.Tensor]:
    """The rows of ``ids[i]`` in ``layers[i]``, with one transfer each way per ps for the tables there.

    A cluster trainer's step would otherwise send ids, rows and gradients
    per table (five tensors each, 26 tables in DeepFM): the tables of one ps
    and one width get their distinct ids in one tensor, the ps looks each
    table's part up and sends all rows back in one tensor, and the gradient
    returns the same way. Other layers (a single process's Keras tables,
    tables split by key) look up one by one.
    """
    values: List[Optional[tf.Tensor]] = [None] * len(layers)
    groups: Dict[tuple, List[int]] = {}
    for i, layer in enumerate(layers):
        if isinstance(layer, GraphEmbedding) and layer.ps_device is not None:
            groups.setdefault((layer.ps_device, layer.embedding_size), []).append(i)
        else:
            values[i] = _rows_of(layer, ids[i])
    for (device, _), members in groups.items():
        uniques, indexes = zip(*(tf.unique(ids[i]) for i in members))
        sizes = tf.stack([tf.size(unique) for unique in uniques])
        packed = tf.concat(uniques, 0)
        with tf.device(device):
            parts = tf.split(tf.identity(packed), tf.identity(sizes), num=len(members))
            rows = tf.concat([layers[i].lookup_on_ps(part) for i, part in zip(members, parts)], 0)
        rows = tf.identity(rows)  # (on this trainer, as is its gradient)
        offsets = tf.cumsum(sizes, exclusive=True)
        for k, i in enumerate(members):
            values[i] = tf.gather(rows, indexes[k] + offsets[k])
    return values  # type: ignore[return-value]


def _rows_of(layer, ids: tf.Tensor) -> tf.Tensor:
    """The rows of ``ids`` (repeats allowed) in a table of this process (or ``layer``'s own lookup in a graph)."""
    if isinstance(layer, GraphEmbedding):
        return layer(ids)
    unique, index = tf.unique(ids)
    return gather_with_dense_gradient(row_part(layer, layer(unique)), index)


@tf.custom_gradient
def gather_with_dense_gradient(rows: tf.Tensor, index: tf.Tensor):
    """``tf.gather(rows, index)`` whose gradient reaches ``rows`` summed per row, a dense tensor.

    ``rows`` are a Keras table's lookup buffer (one row per distinct id). tf.gather's gradient is a list of
    every occurrence's gradient, which made the optimizer dedupe it and update the buffer row by row (Unique,
    segment sums, scatters: ~10 small ops a table). Dense, the buffer is updated in one fused kernel
    (ResourceApplyAdam); every row of the buffer has a gradient, so the update is the same.
    """
    def gradient(upstream):
        return tf.math.unsorted_segment_sum(tf.convert_to_tensor(upstream), index, tf.shape(rows)[0]), None

    return tf.gather(rows, index), gradient


@dataclasses.dataclass
class _TableIds:
    """The ids of one table's features in one vector (see ``DynamicTables._table_ids``)."""

    ids: tf.Tensor
    sizes: List[tf.Tensor]
    row_ids: List[Optional[tf.Tensor]]
    labels: Optional[tf.Tensor]


def _positions_pooled(feature, features, rows: tf.Tensor) -> tf.Tensor:
    """[B, L, width]: each position of a sequence with several ids a position, the ``combiner`` (mean or sum)
    of its ids' ``rows`` (flat, as its ids; a raw sequence's times their numbers); zeros past each sample's
    length."""
    positions = features[positions_key(feature.name)]
    if feature.carries_weights:
        rows = rows * features[weights_key(feature.name)].flat_values[:, None]
    longest = tf.reduce_max(tf.concat([positions.flat_values + 1, tf.zeros([1], tf.int64)], 0))
    slot = positions.value_rowids() * longest + positions.flat_values  # (sample, position), flat
    count = positions.nrows() * longest
    pooled = tf.math.unsorted_segment_sum(rows, slot, count)
    if feature.combiner == "mean" and feature.raw_width:  # (over every column: a missing number is 0)
        pooled = pooled / feature.raw_width
    elif feature.combiner == "mean":
        ids = tf.math.unsorted_segment_sum(tf.ones_like(slot, rows.dtype), slot, count)
        pooled = tf.math.divide_no_nan(pooled, ids[:, None])
    width = tf.constant(rows.shape[1], tf.int64) if rows.shape[1] is not None else \
        tf.shape(rows, out_type=tf.int64)[1]  # (static when known: layers are built on it)
    return tf.reshape(pooled, tf.stack([positions.nrows(), longest, width]))


class DynamicTables(tf.keras.layers.Layer):
    """Holds the tables; ``call(features)`` returns one [B, dim + extra_dims] row per id feature (tags pooled,
    weighted tags by their weights), and [B, L, dim + extra_dims] per sequence feature: its ids' rows in order,
    zeros past each sample's length (padding positions are never looked up, so never trained nor published)."""

    def __init__(self, specs: FeatureSpecs, extra_dims: int = 0, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        self._specs = specs
        self.extra_dims = extra_dims
        self.embeddings: Dict[str, de.keras.layers.Embedding] = {}
        self.statistics: Dict[str, de.Variable] = {}
        self.devices = shard_devices()
        placement = _cluster_devices[-1] if _cluster_devices else None
        by_key = placement is None or placement.by_key
        # Ops with side effects of a graph-mode call (statistics upserts): the train op must run them.
        self.graph_updates: List[tf.Operation] = []
        # Tables that answer lookups outside training instead of the TFRA ones (see ``serve_from``).
        self._serving_tables: Dict[str, object] = data_structures.NoDependency({})
        for i, (name, table) in enumerate(sorted(specs.tables.items())):
            devices = self.devices if by_key or not self.devices else [self.devices[i % len(self.devices)]]
            capacity = _capacities[-1].get(table_variable_name(name), 0)
            if tf.executing_eagerly():
                initializer = tf.keras.initializers.RandomNormal(0.0, table.initializer_stddev, seed=seed + i)
                width = table.dim + extra_dims
                stored = stored_width(width, len(devices or [""]))
                self.embeddings[name] = de.keras.layers.Embedding(
                    stored, key_dtype=tf.int64, value_dtype=tf.float32, initializer=initializer,
                    devices=devices, name=table_variable_name(name), init_capacity=capacity, with_unique=False)
                if stored != width:
                    keep_state_in_rows(self.embeddings[name].params, width)
                draw_rows_for_new_ids_only(self.embeddings[name].params)
            else:
                # A TF1 initializer: its random op draws new values at every step (a seeded Keras
                # initializer in a graph would give every step's new rows the same values).
                initializer = tf.compat.v1.random_normal_initializer(0.0, table.initializer_stddev, seed=seed + i)
                self.embeddings[name] = GraphEmbedding(table.dim + extra_dims, initializer, devices,
                                                       table_variable_name(name), placement or PsPlacement([]),
                                                       capacity)
            if table.keeps_statistics:
                self.statistics[name] = de.get_variable(table_variable_name(name) + "-parameter-stats",
                                                        key_dtype=tf.int64, value_dtype=tf.float32, dim=3,
                                                        initializer=0.0, trainable=False, devices=devices,
                                                        init_size=capacity)
        self.release_names()

    def release_names(self) -> None:
        """Lets another model in this process use the same table names; call again once slots exist.

        TFRA registers each table (and each optimizer slot table) in the
        graph-mode variable store, refuses a second table of the same name, and
        hands out an existing slot table of the same name to a new optimizer,
        even in eager mode where they are independent resources. Names must stay
        stable (slots are checkpointed by name), so instead of renaming we drop
        the registrations once the tables exist.
        """
        store = variable_scope._get_default_variable_store()._vars  # pylint: disable=protected-access
        prefixes = tuple(table_variable_name(name) + "-parameter" for name in self.embeddings)
        for key in [k for k in store if k.startswith(prefixes)]:
            del store[key]

    def serve_from(self, tables: Dict[str, object]) -> None:
        """Lookups outside training read ``tables`` (name -> a table with TFRA's ``lookup(keys,
        return_exists=True)``, e.g. export/core_tables.py's), so a graph traced for inference uses no TFRA op.
        Not tracked here: whoever passes them saves them."""
        missing = sorted(set(self.embeddings) - set(tables))
        if missing:
            raise ValueError(f"serve_from: no table for {missing}")
        self._serving_tables.update(tables)

    def table_spec(self, table: str) -> TableSpec:
        return self._specs.tables[table]

    def table_dim(self, table: str) -> int:
        return self._specs.tables[table].dim

    def rows(self, table: str):
        """``table``'s rows as its readers see them (``export``, ``lookup``, ``size``; rows_with_state.py)."""
        return rows_of(self.embeddings[table])

    def row_width(self, table: str) -> int:
        """How many floats a row of ``table`` has: its dim, plus one for a wide (first-order) weight."""
        return row_width(self.embeddings[table])

    def _needs_masking(self, table: str) -> bool:
        features = self._specs.features_of_table(table)
        return self._specs.tables[table].keeps_statistics or any(f.padding or not f.string_ids for f in features)

    def call(self, features, training=False, labels=None, now=None):
        plain = [table for table in self.embeddings if training and not self._needs_masking(table)]
        # (labels only where the masked lookup counts clicks)
        inputs = {table: self._table_ids(table, features, None if table in plain else labels)
                  for table in self.embeddings}
        values = dict(zip(plain, lookup_together([self.embeddings[t] for t in plain],
                                                 [inputs[t].ids for t in plain])))
        rows = {}
        for table, ids in inputs.items():
            if table not in values:
                values[table] = self._masked_lookup(table, ids.ids, training, ids.labels, now)
            pieces = tf.split(values[table], tf.stack(ids.sizes), axis=0) if len(ids.sizes) > 1 \
                else [values[table]]
            for feature, piece, rowid in zip(self._specs.features_of_table(table), pieces, ids.row_ids):
                if rowid is None:
                    rows[feature.name] = piece
                    continue
                ragged = features[feature.name]
                if feature.positioned:
                    rows[feature.name] = _positions_pooled(feature, features, piece)
                    continue
                if feature.sequence:
                    rows[feature.name] = tf.RaggedTensor.from_row_splits(piece, ragged.row_splits,
                                                                         validate=False).to_tensor()
                    continue
                if feature.weighted:
                    weights = features[weights_key(feature.name)].flat_values
                    pooled = tf.math.unsorted_segment_sum(piece * weights[:, None], rowid, ragged.nrows())
                    if feature.combiner == "mean":  # (weights are > 0: the parser drops the others)
                        total = tf.math.unsorted_segment_sum(weights, rowid, ragged.nrows())
                        pooled = tf.math.divide_no_nan(pooled, total[:, None])
                    rows[feature.name] = pooled
                    continue
                pooled = tf.math.unsorted_segment_sum(piece, rowid, ragged.nrows())
                if feature.combiner == "mean":
                    pooled = pooled / tf.cast(tf.maximum(ragged.row_lengths(), 1), pooled.dtype)[:, None]
                rows[feature.name] = pooled
        return rows

    def _table_ids(self, table: str, features, labels) -> "_TableIds":
        """The ids of every feature of ``table`` in one vector, and what splits them back per feature."""
        flat, sizes, row_ids, labels_flat = [], [], [], []
        for feature in self._specs.features_of_table(table):
            ids = features[feature.name]
            if isinstance(ids, tf.RaggedTensor):
                flat.append(ids.flat_values)
                row_ids.append(ids.value_rowids())
            else:
                flat.append(ids)
                row_ids.append(None)
            sizes.append(tf.size(flat[-1]))
            if labels is not None:
                labels_flat.append(tf.gather(labels, row_ids[-1]) if row_ids[-1] is not None else labels)
        all_labels = None
        if labels_flat:
            all_labels = tf.concat(labels_flat, 0) if len(labels_flat) > 1 else labels_flat[0]
        return _TableIds(tf.concat(flat, 0) if len(flat) > 1 else flat[0], sizes, row_ids, all_labels)

    def _masked_lookup(self, table: str, ids, training: bool, labels: Optional[tf.Tensor], now):
        """Rows for ``ids``: zeros for padding, non-admitted and (outside training) unknown ids."""
        layer = self.embeddings[table]
        unique, index = tf.unique(ids)
        valid = unique >= 0
        width = row_width(layer)
        if not training:
            serving = self._serving_tables.get(table)
            values, exists = (rows_of(layer) if serving is None else serving).lookup(unique, return_exists=True)
            keep = tf.logical_and(exists, valid)
            return tf.gather(values * tf.cast(keep, values.dtype)[:, None], index)
        admitted = valid
        stats = self.statistics.get(table)
        if stats is not None:
            count = tf.math.unsorted_segment_sum(tf.ones_like(index, tf.float32), index, tf.size(unique))
            clicks = tf.math.unsorted_segment_sum(labels, index, tf.size(unique)) if labels is not None \
                else tf.zeros_like(count)
            known = tf.boolean_mask(unique, valid)
            old = stats.lookup(known)
            seen = tf.fill([tf.size(known)], tf.cast(now, tf.float32)) if now is not None else old[:, LAST_SEEN]
            new = tf.stack([old[:, SHOW] + tf.boolean_mask(count, valid),
                            old[:, CLICK] + tf.boolean_mask(clicks, valid), seen], axis=1)
            upsert = stats.upsert(known, new)
            if not tf.executing_eagerly():
                self.graph_updates.append(upsert)
            policy = self._specs.tables[table].admission
            if policy is not None:
                show = tf.scatter_nd(tf.where(valid), tf.cast(new[:, SHOW], tf.float64), tf.shape(unique, tf.int64))
                click = tf.scatter_nd(tf.where(valid), tf.cast(new[:, CLICK], tf.float64), tf.shape(unique, tf.int64))
                _, in_table = layer.params.lookup(unique, return_exists=True)
                admitted = tf.logical_and(valid, tf.logical_or(
                    in_table, admits(policy, unique, show, click, tf.cast(count, tf.float64))))
        positions = tf.where(admitted)
        admitted_rows = row_part(layer, layer(tf.boolean_mask(unique, admitted)))
        rows = tf.scatter_nd(positions, admitted_rows, tf.stack([tf.size(unique, tf.int64), width]))
        return tf.gather(rows, index)

    def sizes(self) -> Dict[str, int]:
        """Number of keys in each table."""
        return {name: int(layer.params.size()) for name, layer in self.embeddings.items()}

    def slot_variables(self, table: str) -> List:
        """The optimizer's slot tables of ``table`` (e.g. Adam's m and v)."""
        return list(self.embeddings[table].optimizer_vars)
