"""Tables whose rows carry Adam's m and v beside the embedding: one find and one insert per table a step.

A single process's table trained by Adam (train/table_adam.py) kept its m‖v in a slot table of its own, so a
step found and inserted every id twice: the row, then m‖v. A table operation's cost is mostly the hash probe
per key, not the width of the row, so inside ``adam_state_in_rows()`` such a table is built three times as
wide, ``[row | m | v]``: the step reads the row and its state in one find and writes them in one insert, and
the table keeps one key per id instead of two (docs/benchmarks.md, "the row, m and v in one table").

What reads a table's rows reads them through ``DynamicTables.rows`` and ``row_width`` (``rows_of``,
``row_width`` here), which are the table itself for every other table. A checkpoint holds what the two tables
held, where they held it: the row columns as the table's ``table-keys``/``table-values``, m‖v as the slot
table's (its saveable writes the columns of this table; ``view_state_columns``). Exports, evaluation,
clusters and older trainers read it unchanged, and a checkpoint written before restores into it: a restore
imports a table's two entries together once both are read (``ColumnsSaveable``, ``finish_restore``). A save
cuts both entries from one export of a table, or, over ``SAVE_WHOLE_ROWS_AT_MOST`` rows, fills them a piece
of rows at a time, so that it holds the entries and not the three-times-wider export beside them.
Used by the single process's trainer (train/eager_engine.py) when its tables' optimizer is Adam.
"""
import contextlib
import functools
import weakref
from typing import Iterator, List, Optional, Tuple

from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()
from tensorflow.python.training.saving import saveable_object  # noqa: E402  pylint: disable=g-import-not-at-top,g-direct-tensorflow-import

# TFRA's CPU table keeps values of up to this many floats in fixed-size arrays; a wider one falls back to a
# slower general table, which would cost more than the probe saved, so wider tables keep the slot table.
MAX_FIXED_WIDTH = 100
_STATE_COPIES = 2  # Adam's m and v, each as wide as the row
_ROW_WIDTH = "_easyonline_row_width"
_SAVES_COLUMNS = "_easyonline_saves_columns"  # on the TFRA hash table whose checkpoint entries are its columns
_building_with_state: List[bool] = [False]


@contextlib.contextmanager
def adam_state_in_rows() -> Iterator[None]:
    """Tables built inside (eager, in one place) keep Adam's m and v in their rows, where their width allows."""
    _building_with_state.append(True)
    try:
        yield
    finally:
        _building_with_state.pop()


def stored_width(width: int, places: int) -> int:
    """How many floats a table of rows of ``width`` built now in ``places`` places stores an id."""
    wide = width * (1 + _STATE_COPIES)
    return wide if _building_with_state[-1] and places == 1 and wide <= MAX_FIXED_WIDTH else width


def keep_state_in_rows(params, width: int) -> None:
    """Marks ``params`` (a TFRA table of ``stored_width`` floats) as rows of ``width`` followed by m and v, and
    makes its checkpoint hold the row columns only (as a table of ``width`` floats saves them)."""
    setattr(params, _ROW_WIDTH, width)
    (table,) = params.tables
    setattr(table, _ROW_WIDTH, width)
    setattr(table, _SAVES_COLUMNS, True)
    table._saveable_fn = functools.partial(ColumnsSaveable, source=table, start=0)  # pylint: disable=protected-access


def state_width_of_table(table) -> int:
    """The row width of a TFRA hash table of a table that keeps Adam's state in its rows."""
    return getattr(table, _ROW_WIDTH)


def _stored_floats(table) -> int:
    """Floats a TFRA hash table stores an id (row, m and v for a table that keeps the state in its rows)."""
    return int(table._default_value.shape[-1])  # pylint: disable=protected-access


def state_width(params) -> Optional[int]:
    """The row width of a table that keeps Adam's state in its rows, else None."""
    return getattr(params, _ROW_WIDTH, None)


def row_width(layer) -> int:
    """How many floats a row of ``layer``'s table has (what lookups, exports and updates carry)."""
    width = state_width(layer.params)
    return int(layer.embedding_size) if width is None else width


def rows_of(layer):
    """``layer``'s table as its readers see it: its rows (``export``, ``lookup``, ``size``)."""
    width = state_width(layer.params)
    return layer.params if width is None else RowColumns(layer.params, width)


def row_part(layer, values: tf.Tensor) -> tf.Tensor:
    """The rows in ``values`` (a lookup of ``layer``'s table): all of it, or its row columns."""
    width = state_width(layer.params)
    return values if width is None else _first_columns(values, width)


def _first_columns(values: tf.Tensor, width: int) -> tf.Tensor:
    """``values[:, :width]`` whose gradient is padded with zeros (a strided slice's gradient op cost ~7% of a
    step); the state columns get no gradient."""
    @tf.custom_gradient
    def first_columns(full):
        def gradient(upstream):
            return tf.pad(upstream, [[0, 0], [0, tf.shape(full)[1] - width]])
        return full[:, :width], gradient

    return first_columns(values)


class RowColumns:
    """The rows of a table that keeps Adam's state beside them: what a table of the rows alone would answer."""

    def __init__(self, params, width: int):
        self._params = params
        self.dim = width
        self.name = params.name
        self.key_dtype, self.value_dtype = params.key_dtype, params.value_dtype

    def size(self, name=None) -> tf.Tensor:
        return self._params.size(name=name)

    def export(self, name=None) -> Tuple[tf.Tensor, tf.Tensor]:
        keys, values = self._params.export(name=name)
        return keys, values[:, :self.dim]

    def lookup(self, keys, return_exists: bool = False, name=None):
        values, exists = self._params.lookup(keys, return_exists=True, name=name)
        values = values[..., :self.dim]
        return (values, exists) if return_exists else values


def write_columns(table, keys: tf.Tensor, values: tf.Tensor, start: int) -> tf.Operation:
    """Writes ``values`` into columns ``start:`` of ``keys``' rows of ``table`` (a TFRA hash table), keeping its
    other columns (zeros for ids it lacks)."""
    full = _stored_floats(table)
    keys = tf.convert_to_tensor(keys, table.key_dtype)
    values = tf.convert_to_tensor(values, table.value_dtype)
    old = table.lookup(keys, dynamic_default_values=tf.zeros([full], table.value_dtype))
    end = start + int(values.shape[-1])
    return table.insert(keys, tf.concat([old[:, :start], values, old[:, end:]], 1))


# A traced save's columns of each table, shared by its entries (one export, the same order of keys in both).
_SAVE_PARTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_PENDING = "_easyonline_pending_entries"
_RESTORE_CHUNK = 1 << 20
# A table of more rows than this has its entries filled in SAVE_PIECES pieces of rows looked up one after another,
# not cut from its export: the export ([row | m | v]) and the two entries cut from it were twice a row's bytes
# at once, the pieces are the entries' bytes and one piece (docs/benchmarks.md, "Tables as they grow").
SAVE_WHOLE_ROWS_AT_MOST = 1 << 20
SAVE_PIECES = 16


def saved_by_pieces(table) -> bool:
    """Whether a save traced now fills ``table``'s entries piece by piece: it holds over
    ``SAVE_WHOLE_ROWS_AT_MOST`` rows (read eagerly, also while a save is traced)."""
    with tf.init_scope():
        return int(table.size()) > SAVE_WHOLE_ROWS_AT_MOST


def save_plan(objects) -> Tuple[bool, ...]:
    """``saved_by_pieces`` of each table among ``objects`` (what a checkpoint saves) that keeps Adam's state in
    its rows: a traced save is made for one plan, and traced again when a table grows past the limit
    (checkpoint/traced_save.py). A small table's save stays the few ops of a cut."""
    return tuple(saved_by_pieces(o) for o in objects if getattr(o, _SAVES_COLUMNS, False))


def _entry_for_save(source, start: int) -> Tuple[tf.Tensor, tf.Tensor]:
    """(keys, values) of ``source``'s entry of the columns from ``start`` (0: the row's, else the state's).
    Traced, both entries come from parts made once per save; eagerly, each entry exports and cuts its own
    columns (nothing would free a shared export)."""
    width = state_width_of_table(source)
    if tf.executing_eagerly():
        keys, values = source.export()
        return keys, (values[:, width:] if start else values[:, :width])
    graph = tf.compat.v1.get_default_graph()
    made = _SAVE_PARTS.setdefault(graph, {})
    if id(source) not in made:
        made[id(source)] = (_filled_by_pieces if saved_by_pieces(source) else _cut_from_export)(source, width)
    keys, rows, state = made[id(source)]
    return keys, (state if start else rows)


def _cut_from_export(source, width: int) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Both entries cut from one export of the table (twice the entries' bytes at once)."""
    keys, values = source.export()
    return keys, values[:, :width], values[:, width:]


def _filled_by_pieces(source, width: int) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """The two entries written into tensors made empty, a piece of rows at a time, in place (``InplaceUpdate``
    forwards its input's buffer): the export's values are dropped as soon as made, so the save holds the
    entries and one piece's rows, not the export beside them."""
    keys, _ = source.export()  # (its values have no reader: freed at once)
    count = tf.shape(keys)[0]
    full = _stored_floats(source)
    rows = tf.raw_ops.Empty(shape=tf.stack([count, width]), dtype=source.value_dtype)
    state = tf.raw_ops.Empty(shape=tf.stack([count, full - width]), dtype=source.value_dtype)
    piece = (count + SAVE_PIECES - 1) // SAVE_PIECES
    for index in range(SAVE_PIECES):  # (each piece after the one before: its rows are written into the tensors)
        start = tf.minimum(index * piece, count)
        end = tf.minimum(start + piece, count)
        with tf.control_dependencies([rows, state]):
            found = source.lookup(keys[start:end])
        places = tf.range(start, end)
        rows = tf.raw_ops.InplaceUpdate(x=rows, i=places, v=found[:, :width])
        state = tf.raw_ops.InplaceUpdate(x=state, i=places, v=found[:, width:])
    return keys, rows, state


class ColumnsSaveable(saveable_object.SaveableObject):
    """A checkpoint entry of ``source``'s row columns (``start`` 0) or its state columns (``start`` the row
    width): keys and values, as TFRA names a table's. Given to a TFRA table as its ``_saveable_fn``.

    Restoring, each entry waits for the other: the second imports the rows with the state beside them in one
    bulk import, as a table of its own restores, when both hold the same keys in the same order (written from
    one export); otherwise the rows are imported and the state written in by key. An entry left alone (a
    model-only checkpoint has no state) is imported by ``finish_restore``.
    """

    def __init__(self, table, name: str, full_name: str = "", source=None, start: int = 0):
        del full_name
        keys, values = _entry_for_save(source, start)
        specs = [saveable_object.SaveSpec(keys, "", name + "-keys"),
                 saveable_object.SaveSpec(values, "", name + "-values")]
        super().__init__(table, specs, name)  # (``table``: whose entry this is; the slot table's is read from
        self._source, self._start = source, start  # ``source``, its own table stays empty)

    def restore(self, restored_tensors, restored_shapes, name=None):
        del restored_shapes, name
        pending = getattr(self._source, _PENDING, None) or {}
        pending[self._start] = tuple(restored_tensors)
        setattr(self._source, _PENDING, pending)
        if len(pending) == 2:
            _import_pending(self._source)
        return tf.no_op()


def _import_pending(table) -> None:
    """Imports what a restore read of ``table``'s entries: rows, state or both (module docstring)."""
    pending = getattr(table, _PENDING, None) or {}
    setattr(table, _PENDING, None)
    rows, state = pending.get(0), next((part for start, part in pending.items() if start), None)
    width = state_width_of_table(table)
    full = _stored_floats(table)
    if rows is None:
        if state is not None:
            write_columns(table, state[0], state[1], width)
        return
    keys, values = rows
    together = state is not None and state[0].shape == keys.shape and bool(tf.reduce_all(tf.equal(state[0], keys)))
    table.clear()  # (what an import does first)
    count = int(tf.shape(keys)[0])
    for start in range(0, count, _RESTORE_CHUNK):  # (a chunk at a time: the rows side by side are 2x the entries)
        end = min(start + _RESTORE_CHUNK, count)
        beside = state[1][start:end] if together else tf.zeros([end - start, full - width], values.dtype)
        table.insert(keys[start:end], tf.concat([values[start:end], beside], 1))
    if state is not None and not together:
        write_columns(table, state[0], state[1], width)


def finish_restore(tables) -> None:
    """Imports the entries a restore of ``tables`` (a DynamicTables) read but left waiting for their other half
    (``ColumnsSaveable``). Call after every restore of a model whose tables keep Adam's state in their rows."""
    for layer in tables.embeddings.values():
        if state_width(layer.params) is not None:
            (table,) = layer.params.tables
            _import_pending(table)


def view_state_columns(slot, params) -> None:
    """Makes ``slot`` (the m‖v table checkpoints name) a view of ``params``' state columns: its checkpoint entry,
    ``export`` and ``upsert`` are those columns'. Its own table stays empty."""
    width = state_width(params)
    (source,) = params.tables
    (own,) = slot.tables
    own._saveable_fn = functools.partial(ColumnsSaveable, source=source, start=width)  # pylint: disable=protected-access

    def export(name=None):
        keys, values = source.export(name=name)
        return keys, values[:, width:]

    slot.export = export
    slot.upsert = lambda keys, values, name=None: write_columns(source, keys, values, width)
