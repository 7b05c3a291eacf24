"""One TFRA dynamic table per embedding name, and the lookup of every id feature.

Tables start empty and grow as ids are trained on: no vocabulary and no
``num_embeddings``. Models that need a first-order (wide) weight per id ask
for ``extra_dims=1``: the weight is stored as one more column of the same
row, so one lookup and one sparse optimizer update serve both.
"""
import re
from typing import Dict

from easyonline import ensure_legacy_keras
from easyonline.features.feature_spec import FeatureSpecs

tf = ensure_legacy_keras()
from tensorflow.python.ops import variable_scope  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
from tensorflow_recommenders_addons import dynamic_embedding as de  # pylint: disable=g-import-not-at-top


def table_variable_name(table: str) -> str:
    """TFRA names must be valid op names; the config's names may not be."""
    return "emb_" + re.sub(r"[^A-Za-z0-9_.\-]", "_", table)


class DynamicTables(tf.keras.layers.Layer):
    """Holds the tables; ``call(features)`` returns one [B, dim + extra_dims] row per id feature."""

    def __init__(self, specs: FeatureSpecs, extra_dims: int = 0, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        self._specs = specs
        self.extra_dims = extra_dims
        self.embeddings: Dict[str, de.keras.layers.Embedding] = {}
        for i, (name, table) in enumerate(sorted(specs.tables.items())):
            self.embeddings[name] = de.keras.layers.Embedding(
                table.dim + extra_dims,
                key_dtype=tf.int64,
                value_dtype=tf.float32,
                initializer=tf.keras.initializers.RandomNormal(0.0, table.initializer_stddev, seed=seed + i),
                name=table_variable_name(name))
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

    def table_dim(self, table: str) -> int:
        return self._specs.tables[table].dim

    def call(self, features):
        rows = {}
        for feature in self._specs.id_features:
            layer = self.embeddings[feature.table]
            ids = features[feature.name]
            if isinstance(ids, tf.RaggedTensor):
                values = layer(ids.flat_values)
                nrows = ids.nrows()
                pooled = tf.math.unsorted_segment_sum(values, ids.value_rowids(), nrows)
                if feature.combiner == "mean":
                    counts = tf.cast(tf.maximum(ids.row_lengths(), 1), pooled.dtype)
                    pooled = pooled / counts[:, None]
                rows[feature.name] = pooled
            else:
                rows[feature.name] = layer(ids)
        return rows

    def sizes(self) -> Dict[str, int]:
        """Number of keys in each table."""
        return {name: int(layer.params.size()) for name, layer in self.embeddings.items()}
