"""Embedding tables as TensorFlow core hash tables, for an export that stock TensorFlow Serving loads.

A ``CoreTable`` holds one dynamic table's rows in a
``tf.lookup.experimental.MutableHashTable`` (int64 key -> float32 row of the
table's full width, extra_dims included) and answers the calls serving makes
on a TFRA table: ``lookup`` (with ``return_exists``), ``upsert``, ``remove``,
``export`` and ``size``. So serving_module.py and DynamicTables' inference
path have one implementation for both export kinds.

``DenseHashTable`` would be faster, but reserves an empty and a deleted key
that no id may take; hashed ids span all of int64, so any reserved pair could
be a real id. ``MutableHashTable`` reserves none.
"""
import re
from typing import Dict, Tuple

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.embedding.dynamic_tables import table_variable_name

tf = ensure_legacy_keras()


class CoreTable(tf.Module):
    """One table's rows in a core ``MutableHashTable``; an unknown id reads as a row of zeros."""

    def __init__(self, width: int, name: str):
        super().__init__(name=re.sub(r"\W", "_", name))
        self.width = width
        self.table = tf.lookup.experimental.MutableHashTable(tf.int64, tf.float32, tf.zeros([width], tf.float32),
                                                             name=re.sub(r"[^A-Za-z0-9_.\-]", "_", name))

    @property
    def embedding_size(self) -> int:
        return self.width

    def lookup(self, keys, return_exists: bool = False):
        """The rows of ``keys``; with ``return_exists``, also whether each row differs from the zero default
        (a stored row of zeros reads the same either way, which is all a lookup's caller masks for)."""
        values = self.table.lookup(keys)
        if not return_exists:
            return values
        return values, tf.reduce_any(tf.not_equal(values, 0.0), axis=1)

    def upsert(self, keys, values):
        return self.table.insert(keys, values)

    def remove(self, keys):
        return self.table.remove(keys)

    def export(self) -> Tuple[tf.Tensor, tf.Tensor]:
        return self.table.export()

    def size(self):
        return self.table.size()


def core_tables(model) -> Dict[str, CoreTable]:
    """A ``CoreTable`` per dynamic table of ``model`` (a models/base.py Model), filled with its rows (eagerly)."""
    out = {}
    for name in sorted(model.tables.embeddings):
        keys, values = model.tables.rows(name).export()
        table = CoreTable(model.tables.row_width(name), f"core_{table_variable_name(name)}")
        table.upsert(keys, values)
        out[name] = table
    return out
