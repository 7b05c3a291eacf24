"""A cluster's tables read and written through the chief's session: publishing, saves, eviction.

A single process reads its TFRA tables eagerly; on a cluster they live on the
ps, in a graph, so each access runs an op built with the training graph
(TableAccess, below) through the chief's session, which is thread-safe
and reports a lost ps as ClusterFailure.
"""
from typing import Callable, Dict, Iterator, List, Tuple

import numpy as np

from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()


class TableAccess:
    """The ops: lookup and export of every table; export, remove and upsert of every evicting table's
    parameters, optimizer slots and statistics, and its sizes. Build inside the training graph, after its optimizer."""

    def __init__(self, tables):
        v1 = tf.compat.v1
        self.keys_in = v1.placeholder(tf.int64, [None], name="access_keys")
        self.lookup_keys = {name: v1.placeholder(tf.int64, [None], name=f"lookup_keys_{i}")
                            for i, name in enumerate(tables.embeddings)}
        self.lookup = {name: table.params.lookup(self.lookup_keys[name], return_exists=True)
                       for name, table in tables.embeddings.items()}
        self.export_rows = {name: table.params.export() for name, table in tables.embeddings.items()}
        # one op per ps shard: a full sync pulls one shard at a time to the chief, not the whole table
        self.export_shards = {name: [shard.export() for shard in table.params.tables]
                              for name, table in tables.embeddings.items()}
        self.variables: Dict[str, Dict] = {}
        self.sizes: Dict[str, Tuple] = {}  # (rows, statistics) of every evicting table: size_bound.py's checks
        for name in tables.embeddings:
            if tables.table_spec(name).eviction is None:
                continue
            self.sizes[name] = (tables.embeddings[name].params.size(), tables.statistics[name].size())
            for variable in [tables.embeddings[name].params, tables.statistics[name], *tables.slot_variables(name)]:
                values_in = v1.placeholder(tf.float32, [None, variable.dim])
                self.variables[variable.name] = {"export": variable.export(), "values_in": values_in,
                                                 "remove": variable.remove(self.keys_in),
                                                 "upsert": variable.upsert(self.keys_in, values_in)}


class SessionTableRows:
    """publish.snapshot.TableRows through a session."""

    def __init__(self, session_run: Callable, access: TableAccess):
        self._run = session_run
        self._access = access

    def names(self) -> List[str]:
        return list(self._access.export_rows)

    def export(self, table: str) -> Tuple[np.ndarray, np.ndarray]:
        return tuple(self._run(self._access.export_rows[table]))

    def export_shards(self, table: str) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
        """One ps shard per session run: the chief holds one shard's rows at a time."""
        for shard_op in self._access.export_shards[table]:
            keys, values = self._run(shard_op)
            yield keys, values
            del keys, values

    def lookup(self, keys: Dict[str, np.ndarray]) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
        """Every table's keys in one session run: one round trip to the ps, not one per table."""
        if not keys:
            return {}
        found = self._run({name: self._access.lookup[name] for name in keys},
                          {self._access.lookup_keys[name]: k for name, k in keys.items()})
        return {name: tuple(rows) for name, rows in found.items()}


class SessionTableOps:
    """embedding.eviction.TableOps through a session."""

    def __init__(self, session_run: Callable, access: TableAccess):
        self._run = session_run
        self._access = access

    def export(self, variable) -> Tuple[np.ndarray, np.ndarray]:
        return tuple(self._run(self._access.variables[variable.name]["export"]))

    def remove(self, variable, keys: np.ndarray) -> None:
        if len(keys):
            self._run(self._access.variables[variable.name]["remove"], {self._access.keys_in: keys})

    def upsert(self, variable, keys: np.ndarray, values: np.ndarray) -> None:
        ops = self._access.variables[variable.name]
        self._run(ops["upsert"], {self._access.keys_in: keys, ops["values_in"]: values})
