"""Stable ids for dense parameters and embedding tables, shared by trainer and serving.

Update messages name parameters by small ids instead of strings. The maps are
written into model_dir at train time (``DENSE_UPDATE_VARIABLES``, JSON
name -> id, and ``embed_name_to_ids.txt``, ``name<TAB>id<TAB>dim`` lines, as
EasyRec names them) and the export copies them, so trainer and serving can
never disagree. Ids are never reused: a restart reads the files and only
appends ids for new names.

Dense parameters are named by their path in the model's checkpoint object
graph (``deep/_layers/0/kernel``), which, unlike Keras variable names, does
not depend on how many models the process built before.
"""
import dataclasses
import json
from typing import Any, Dict, Tuple

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.utils import fileio

tf = ensure_legacy_keras()
from tensorflow.python.checkpoint import graph_view  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import

DENSE_IDS_FILE = "DENSE_UPDATE_VARIABLES"
TABLE_IDS_FILE = "embed_name_to_ids.txt"
_TABLES_PATH = "tables/"


def dense_variables(model) -> Dict[str, Any]:
    """Every dense variable of ``model`` (trainable or not, e.g. batch-norm moments) by checkpoint path."""
    objects, paths = graph_view.ObjectGraphView(model).breadth_first_traversal()[:2]
    found = {}
    for obj in objects:
        if isinstance(obj, tf.Variable):
            path = "/".join(ref.name for ref in paths[obj])
            if not path.startswith(_TABLES_PATH):
                found[path] = obj
    return dict(sorted(found.items()))


@dataclasses.dataclass
class ParameterIds:
    dense: Dict[str, int]               # checkpoint path -> id
    tables: Dict[str, Tuple[int, int]]  # table name -> (id, row width)

    def dense_names(self) -> Dict[int, str]:
        return {i: name for name, i in self.dense.items()}

    def to_files(self) -> Dict[str, str]:
        lines = [f"{name}\t{i}\t{width}\n" for name, (i, width) in sorted(self.tables.items(), key=lambda kv: kv[1][0])]
        return {DENSE_IDS_FILE: json.dumps(self.dense, indent=1, sort_keys=True) + "\n", TABLE_IDS_FILE: "".join(lines)}


def parse_table_ids(text: str, path: str = TABLE_IDS_FILE) -> Dict[str, Tuple[int, int]]:
    tables = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
            raise ValueError(f"{path}:{number}: expected name<TAB>id<TAB>dim, got {line!r}")
        tables[parts[0]] = (int(parts[1]), int(parts[2]))
    return tables


def read_parameter_ids(directory: str) -> ParameterIds:
    """Reads the two files from ``directory`` (model_dir or an export's assets)."""
    dense_path, table_path = fileio.join(directory, DENSE_IDS_FILE), fileio.join(directory, TABLE_IDS_FILE)
    dense = json.loads(fileio.read_text(dense_path))
    if not isinstance(dense, dict) or not all(isinstance(v, int) for v in dense.values()):
        raise ValueError(f"{dense_path}: expected a JSON object of name -> integer id")
    return ParameterIds(dense, parse_table_ids(fileio.read_text(table_path), table_path))


def _extend(existing: Dict[str, int], names) -> Dict[str, int]:
    ids = dict(existing)
    next_id = max(ids.values(), default=-1) + 1
    for name in names:
        if name not in ids:
            ids[name] = next_id
            next_id += 1
    return ids


def ensure_parameter_ids(model_dir: str, model) -> ParameterIds:
    """Loads the ids in model_dir, adds ids for parameters new to it, writes the files back if changed."""
    old = ParameterIds({}, {})
    if fileio.exists(fileio.join(model_dir, DENSE_IDS_FILE)) and fileio.exists(fileio.join(model_dir, TABLE_IDS_FILE)):
        old = read_parameter_ids(model_dir)
    dense = _extend(old.dense, dense_variables(model))
    widths = {name: model.tables.row_width(name) for name in sorted(model.tables.embeddings)}
    table_ids = _extend({name: i for name, (i, _) in old.tables.items()}, widths)
    for name, (_, width) in old.tables.items():
        if name in widths and widths[name] != width:
            raise ValueError(f"{fileio.join(model_dir, TABLE_IDS_FILE)}: table {name} had rows of {width} floats, "
                             f"the model has {widths[name]}; use a new model_dir for a changed embedding_dim")
    tables = {name: (i, widths.get(name, old.tables.get(name, (0, 0))[1])) for name, i in table_ids.items()}
    ids = ParameterIds(dense, tables)
    if ids != old:
        for name, text in ids.to_files().items():
            fileio.write_text_atomic(fileio.join(model_dir, name), text)
    return ids
