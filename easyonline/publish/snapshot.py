"""Reads the rows an update (or a base/delta save) carries, as they are in the tables now."""
from typing import Dict, List, Optional

import numpy as np

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.embedding.change_tracker import split_changes, unique_keys
from easyonline.updates.param_ids import ParameterIds
from easyonline.updates.codec import UpdateSnapshot

tf = ensure_legacy_keras()


def take_snapshot(tables, ids: ParameterIds, step: int, create_time: float, positions: Dict[int, int],
                  dense: Optional[Dict[int, np.ndarray]], trained: Dict[str, List[np.ndarray]],
                  deleted: Dict[str, List[np.ndarray]], full_sync: bool = False) -> UpdateSnapshot:
    """Rows of the ``trained`` and ``deleted`` keys (every row when ``full_sync``), and deletes.

    Safe to call while another thread trains: a row read here may be a step
    old, but its key is then recorded again and re-sent with the next update.
    """
    snapshot = UpdateSnapshot(step, create_time, positions, dense=dense or {}, full_sync=full_sync)
    for name, layer in tables.embeddings.items():
        table_id = ids.tables[name][0]
        gone_keys = unique_keys(deleted.get(name, []))
        if full_sync:
            keys, values = (t.numpy() for t in layer.params.export())
            gone = gone_keys[~np.isin(gone_keys, keys)]
        else:
            keys = unique_keys(trained.get(name, []) + [gone_keys])
            if not len(keys):
                continue
            values, exists = layer.params.lookup(tf.constant(keys), return_exists=True)
            keys, values, gone = split_changes(keys, gone_keys, values.numpy(), exists.numpy())
        if len(keys):
            snapshot.rows[table_id] = (keys, values)
        if len(gone):
            snapshot.deletes[table_id] = gone
    return snapshot
