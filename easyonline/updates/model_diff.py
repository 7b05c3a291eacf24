"""Compares a replica rebuilt from the update stream with a live model, bit for bit (tests, the demo)."""
import numpy as np

from easyonline.updates.param_ids import ParameterIds, dense_variables
from easyonline.updates.replica import ParameterReplica


def differences_from_model(replica: ParameterReplica, model, ids: ParameterIds) -> list:
    """What differs between the replica and a live model (empty when they match bit for bit)."""
    found = []
    for name in model.tables.embeddings:
        keys, values = (t.numpy() for t in model.tables.rows(name).export())
        order = np.argsort(keys)
        got_keys, got_rows = replica.table_arrays(ids.tables[name][0])
        if not np.array_equal(got_keys, keys[order]):
            found.append(f"table {name}: {len(got_keys)} keys in the replica, {len(keys)} in the model")
        elif len(keys) and not np.array_equal(got_rows, values[order]):  # (two empty tables: equal, whatever
            # the replica's width: it knows a row's width only from a row)
            found.append(f"table {name}: rows differ")
    for name, variable in dense_variables(model).items():
        got = replica.dense.get(ids.dense[name])
        if got is None or not np.array_equal(got, variable.numpy()):
            found.append(f"dense {name}: {'missing' if got is None else 'values differ'}")
    return found
