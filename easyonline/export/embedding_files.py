"""Writes every embedding table's keys and vectors to files, for external vector stores.

Per table ``<dir>/<table>/part-00000.tsv`` (``key<TAB>v1,v2,...`` lines,
float32 values printed with 9 significant digits, so they read back exactly),
then ``<dir>/manifest.json`` (tables, dims, row counts, checkpoint, step) and
``<dir>/DONE`` last: a reader that waits for DONE never sees a half export.
Only the embedding columns are written; the first-order (wide) weight that
DeepFM and Wide&Deep keep in an extra column of the same row is not a vector.
"""
import json
from typing import Dict

import numpy as np

from easyonline.utils import fileio

DONE = "DONE"
MANIFEST = "manifest.json"
ROWS_PER_FILE = 1_000_000


def export_embeddings(model, directory: str, checkpoint: str, step: int) -> Dict[str, int]:
    """Writes the tables of ``model`` (a models/base.py Model); returns {table: rows written}."""
    fileio.makedirs(directory)
    counts, dims = {}, {}
    for name in sorted(model.tables.embeddings):
        keys, values = (t.numpy() for t in model.tables.rows(name).export())
        dim = model.tables.table_dim(name)
        order = np.argsort(keys)
        keys, values = keys[order], values[order, :dim]
        table_dir = fileio.join(directory, name)
        fileio.makedirs(table_dir)
        for part, begin in enumerate(range(0, max(len(keys), 1), ROWS_PER_FILE)):
            rows = range(begin, min(begin + ROWS_PER_FILE, len(keys)))
            text = "".join(f"{keys[i]}\t{','.join(f'{v:.9g}' for v in values[i])}\n" for i in rows)
            fileio.write_text_atomic(fileio.join(table_dir, f"part-{part:05d}.tsv"), text)
        counts[name], dims[name] = len(keys), dim
    manifest = {"tables": {n: {"rows": counts[n], "dim": dims[n]} for n in counts}, "checkpoint": checkpoint,
                "step": step, "format": "key<TAB>comma-separated float32 values, one row per line"}
    fileio.write_text_atomic(fileio.join(directory, MANIFEST), json.dumps(manifest, indent=1) + "\n")
    fileio.write_text_atomic(fileio.join(directory, DONE), "")
    return counts
