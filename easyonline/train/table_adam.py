"""Adam for the rows of a table held in one place: its m and v side by side in one slot table ("<table>/mv").

TFRA keeps each optimizer slot in a table of its own, so a step of Adam made six table operations per table
(the row's find, finds of m and of v, inserts of the row, m and v): 59% of DeepFM's step on CPU
(tools/bench/step_profile.py). A table operation's cost is per key, mostly the hash probe's random memory
access (~120-170 ns a key at 1,000 keys whether a row has 17 floats or 51): m and v in one row of twice the
width are found and written in one probe each, four table operations instead of six, and one key stored
per id instead of two. The update is Adam's sparse formula (ResourceApplyAdam's, as TFRA applies it).

A table built to keep m and v in its rows (embedding/rows_with_state.py: the trainer's, where its width
allows) is updated there with one insert; its m‖v table is then a view of those columns, kept so that
checkpoints name m and v as before.

Used for tables in one place of a single-process (Keras) model trained by Adam without ``bp_v2``. Tables
split over several places and the cluster's graph-mode tables keep TFRA's slots. A checkpoint written with
TFRA's separate m and v tables is taken over on restore (``adopt_split_slots``).
"""
import re
from typing import Any, Dict, List, Tuple

import numpy as np

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.embedding.rows_with_state import state_width, view_state_columns

tf = ensure_legacy_keras()
from tensorflow_recommenders_addons import dynamic_embedding as de  # pylint: disable=g-import-not-at-top

SLOT = "mv"
_SLOTS_ATTRIBUTE = "_easyonline_mv_tables"


def keeps_slots_together(optimizer) -> bool:
    """Whether ``optimizer`` (as ``build_optimizer`` returns it) updates single-place tables here."""
    return hasattr(optimizer, _SLOTS_ATTRIBUTE)


def _applies_to(variable) -> bool:
    """A Keras table's lookup buffer whose table is in one place, written (not accumulated) by the step."""
    if not isinstance(variable, de.shadow_ops.ShadowVariable):
        return False
    params = variable.params
    return params.trainable and not params.bp_v2 and len(params.devices) == 1 and params.restrict_policy is None


def slot_name(params) -> str:
    """The slot table's name: TFRA's slots are ``<table>/<op>/m`` and ``.../v``; this one is ``<table>/mv``."""
    return params.name + "/" + SLOT


def _slot_table(optimizer, variable):
    """The m‖v table of ``variable``'s table, made on first use, checkpointed with the optimizer and listed
    among the table's slots (``layer.optimizer_vars``: eviction and size bounds remove its ids there too)."""
    tables: Dict[str, object] = getattr(optimizer, _SLOTS_ATTRIBUTE)
    params = variable.params
    table = tables.get(params.name)
    if table is None:
        width = state_width(params)
        with tf.init_scope():
            table = de.Variable(name=slot_name(params), key_dtype=params.key_dtype, value_dtype=params.value_dtype,
                                dim=2 * (width or params.dim), devices=params.devices, initializer=0.0,
                                init_size=0 if width else params.init_size, kv_creator=params.kv_creator,
                                trainable=False, checkpoint=params.checkpoint)
        if width:  # m and v live in the table's rows; this one names them in checkpoints
            view_state_columns(table, params)
        optimizer._track_trackable(table, name=slot_name(params), overwrite=True)  # pylint: disable=protected-access
        variable._optimizer_vars.value.append(table)  # pylint: disable=protected-access
        tables[params.name] = table
    return table


def _update(optimizer, coefficients: Tuple[tf.Tensor, ...], gradient, variable) -> List:
    """Adam's step for the rows in ``variable`` (the batch's lookup buffer) given their ``gradient``; the table
    and its m‖v slot written back."""
    alpha, beta_1, beta_2, epsilon = coefficients
    ids, rows = variable.ids, variable.read_value(do_prefetch=False)
    if isinstance(gradient, tf.IndexedSlices):  # only the rows it names, each once with its summed gradient
        touched, index = tf.unique(gradient.indices)
        gradient = tf.math.unsorted_segment_sum(gradient.values, index, tf.size(touched))
        ids, rows = tf.gather(ids, touched), tf.gather(rows, touched)
    slots = _slot_table(optimizer, variable)
    width = state_width(variable.params)
    if width:  # [row | m | v] in one table (embedding/rows_with_state.py); the gradient's state columns are 0
        rows, m, v = tf.split(rows, 3, axis=1)
        gradient = gradient[:, :width]
    else:
        m, v = tf.split(slots.lookup(ids), 2, axis=1)  # zeros for ids new to the table
    m = beta_1 * m + (1.0 - beta_1) * gradient
    v = beta_2 * v + (1.0 - beta_2) * tf.square(gradient)
    rows = rows - alpha * m / (tf.sqrt(v) + epsilon)
    if width:
        return [variable.params.upsert(ids, tf.concat([rows, m, v], 1))]
    return [variable.params.upsert(ids, rows), slots.upsert(ids, tf.concat([m, v], 1))]


def _coefficients(optimizer, dtype) -> Tuple[tf.Tensor, ...]:
    """This step's (bias-corrected rate, beta_1, beta_2, epsilon), as the legacy Adam computes them."""
    optimizer._create_hypers()  # pylint: disable=protected-access
    step = tf.cast(optimizer.iterations + 1, dtype)
    beta_1 = tf.identity(optimizer._get_hyper("beta_1", dtype))  # pylint: disable=protected-access
    beta_2 = tf.identity(optimizer._get_hyper("beta_2", dtype))  # pylint: disable=protected-access
    rate = tf.identity(optimizer._decayed_lr(dtype))  # pylint: disable=protected-access
    alpha = rate * tf.sqrt(1.0 - tf.pow(beta_2, step)) / (1.0 - tf.pow(beta_1, step))
    return alpha, beta_1, beta_2, tf.convert_to_tensor(optimizer.epsilon, dtype)


def keep_slots_together(optimizer) -> None:
    """Makes ``optimizer`` (a legacy Adam wrapped by TFRA's DynamicEmbeddingOptimizer) update single-place
    tables here, with m and v in one slot table; everything else goes through TFRA's ``apply_gradients``."""
    if optimizer.amsgrad:
        return
    setattr(optimizer, _SLOTS_ATTRIBUTE, {})
    tfra_apply_gradients = optimizer.apply_gradients

    def apply_gradients(grads_and_vars, name=None, **kwargs):
        grads_and_vars = list(grads_and_vars)
        ours = [(g, v) for g, v in grads_and_vars if g is not None and _applies_to(v)]
        if not ours:
            return tfra_apply_gradients(grads_and_vars, name, **kwargs)
        rest = [(g, v) for g, v in grads_and_vars if not (g is not None and _applies_to(v))]
        coefficients = _coefficients(optimizer, ours[0][1].dtype)  # (reads the step before it is counted)
        updates = [op for gradient, variable in ours for op in _update(optimizer, coefficients, gradient, variable)]
        with tf.control_dependencies(updates):
            if any(g is not None for g, _ in rest):
                return tfra_apply_gradients(rest, name, **kwargs)
            return optimizer.iterations.assign_add(1)

    optimizer.apply_gradients = apply_gradients


_TFRA_SLOT_KEYS = re.compile(r"tables_of_(.+)\.S[^/]*\.S([mv])/0/\.ATTRIBUTES/table-keys$")


def _escaped(name: str) -> str:
    """A name as a checkpoint key spells it (``/`` as ``.S``, ``.`` as ``..``)."""
    return name.replace(".", "..").replace("/", ".S")


def adopt_split_slots(path: str, optimizer, layers: Dict[str, Any]) -> List[str]:
    """Fills the m‖v tables from a checkpoint that kept m and v apart (TFRA's slots, before these tables);
    returns the tables taken over. A no-op for checkpoints that have the m‖v tables.

    ``layers``: the model's Keras tables by name. An id in one of m and v but not the other (no step writes
    one without the other) gets zeros for the missing half.
    """
    if not keeps_slots_together(optimizer):
        return []
    reader = tf.train.load_checkpoint(path)
    names = list(reader.get_variable_to_shape_map())
    split: Dict[str, Dict[str, str]] = {}
    for key in names:
        match = _TFRA_SLOT_KEYS.search(key)
        if match:
            split.setdefault(match.group(1), {})[match.group(2)] = key
    taken = []
    for table, layer in layers.items():
        params = layer.params
        if not _applies_to(layer.shadow):
            continue
        ours = "tables_of_" + _escaped(slot_name(params)) + "/0/"
        prefix = _escaped(params.name + "/")
        halves = next((found for owner, found in split.items() if owner.startswith(prefix)), None)
        if halves is None or set(halves) != {"m", "v"} or any(ours in key for key in names):
            continue
        keys_m, keys_v = (reader.get_tensor(halves[s]) for s in "mv")
        values_m, values_v = (reader.get_tensor(halves[s].replace("table-keys", "table-values")) for s in "mv")
        keys = np.union1d(keys_m, keys_v)
        width = state_width(params) or params.dim
        state = np.zeros([len(keys), 2 * width], np.float32)
        state[np.searchsorted(keys, keys_m), :width] = values_m
        state[np.searchsorted(keys, keys_v), width:] = values_v
        _slot_table(optimizer, layer.shadow).upsert(tf.constant(keys, params.key_dtype), tf.constant(state))
        taken.append(table)
    return taken


def sparse_part(optimizer) -> Any:
    """The optimizer that updates the tables: ``optimizer`` itself, or a PartOptimizers' ``sparse``."""
    return getattr(optimizer, "sparse", optimizer)
