"""One exported SavedModel version, loaded: predict from raw inputs, apply decoded update messages.

A reader of the SavedModel must import tensorflow_recommenders_addons first:
the tables are TFRA ops that stock TensorFlow does not know.
"""
import json
import os
import threading
from typing import Dict, List

import numpy as np

from easyonline import ensure_legacy_keras
from easyonline.export.exporter import INCR_UPDATE_FILE, PIPELINE_FILE
from easyonline.protos import update_pb2
from easyonline.publish.param_ids import read_parameter_ids
from easyonline.publish.update_codec import dense_slice, sparse_arrays

tf = ensure_legacy_keras()
import tensorflow_recommenders_addons  # noqa: E402,F401  pylint: disable=g-import-not-at-top,unused-import


def newest_version(export_dir: str) -> str:
    """The highest numbered version directory in ``export_dir`` (or ``export_dir`` itself if it is one)."""
    if os.path.exists(os.path.join(export_dir, "saved_model.pb")):
        return export_dir
    versions = [name for name in os.listdir(export_dir) if name.isdigit()
                and os.path.exists(os.path.join(export_dir, name, "saved_model.pb"))]
    if not versions:
        raise FileNotFoundError(f"no exported version (a numbered directory with saved_model.pb) in {export_dir}")
    return os.path.join(export_dir, max(versions, key=int))


class LoadedExport:
    def __init__(self, export_dir: str):
        self.path = newest_version(export_dir)
        self.version = os.path.basename(os.path.normpath(self.path))
        self._module = tf.saved_model.load(self.path)
        # The module's own functions keep the exported input names as dict keys (signature argument
        # names are sanitized and lowercased); the signatures are there for saved_model_cli and TF Serving.
        self._serve = self._module.serve
        self._update = self._module.incr_update
        assets = os.path.join(self.path, "assets")
        self.ids = read_parameter_ids(assets)
        with open(os.path.join(assets, INCR_UPDATE_FILE)) as f:
            self.update_info = json.load(f)
        with open(os.path.join(assets, PIPELINE_FILE)) as f:
            self.pipeline_config = f.read()
        (raw_specs,), _ = self._serve.concrete_functions[0].structured_input_signature
        self.inputs: Dict[str, tf.DType] = {name: spec.dtype for name, spec in raw_specs.items()}
        self._widths = {table_id: width for table_id, width in self.ids.tables.values()}
        self._update_lock = threading.Lock()

    def predict(self, inputs: Dict[str, List]) -> Dict[str, np.ndarray]:
        """``inputs``: one equally long list per input; raises ValueError naming a bad or missing input."""
        missing = sorted(set(self.inputs) - set(inputs))
        if missing:
            raise ValueError(f"missing input(s) {missing}; the model takes {sorted(self.inputs)}")
        unknown = sorted(set(inputs) - set(self.inputs))
        if unknown:
            raise ValueError(f"unknown input(s) {unknown}; the model takes {sorted(self.inputs)}")
        sizes = {len(v) for v in inputs.values()}
        if len(sizes) != 1:
            raise ValueError(f"inputs have different lengths {sorted(sizes)}")
        tensors = {}
        for name, dtype in self.inputs.items():
            try:
                tensors[name] = _tensor(inputs[name], dtype)
            except (TypeError, ValueError) as e:
                raise ValueError(f"input {name!r}: expected {dtype.name} values ({e})") from None
        out = self._serve(tensors)
        return {name: value.numpy() for name, value in out.items()}

    def score_features(self, features) -> np.ndarray:
        """Probabilities for already parsed features (the export's pipeline.config parser's output)."""
        return self._module.score_features(features)["probs"].numpy()

    def apply(self, message: update_pb2.UpdateMessage) -> int:
        """Applies one decoded (and checked) update message; returns the number of entries applied."""
        args = {"dense_ids": [], "dense_offsets": [], "dense_lengths": [], "dense_values": []}
        for entry in message.dense:
            values = dense_slice(entry)
            args["dense_ids"].append(entry.id)
            args["dense_offsets"].append(entry.offset)
            args["dense_lengths"].append(len(values))
            args["dense_values"].append(values)
        tensors = {
            "dense_ids": tf.constant(args["dense_ids"], tf.int64, shape=[len(args["dense_ids"])]),
            "dense_offsets": tf.constant(args["dense_offsets"], tf.int64, shape=[len(args["dense_ids"])]),
            "dense_lengths": tf.constant(args["dense_lengths"], tf.int64, shape=[len(args["dense_ids"])]),
            "dense_values": tf.constant(np.concatenate(args["dense_values"]) if args["dense_values"]
                                        else np.zeros(0, np.float32)),
        }
        per_table: Dict[int, List] = {t: [[], [], []] for t in self._widths}
        for entry in message.sparse:
            if entry.table_id not in per_table:
                raise ValueError(f"table id {entry.table_id} is not in this export's embed_name_to_ids.txt")
            if entry.dim != self._widths[entry.table_id]:
                raise ValueError(f"table id {entry.table_id}: rows of {entry.dim} floats, the export has "
                                 f"{self._widths[entry.table_id]}")
            deleted, keys, values = sparse_arrays(entry)
            per_table[entry.table_id][0].append(deleted)
            per_table[entry.table_id][1].append(keys)
            per_table[entry.table_id][2].append(values)
        for table_id, (deleted, keys, values) in per_table.items():
            width = self._widths[table_id]
            tensors[f"table_{table_id}_deleted"] = tf.constant(np.concatenate(deleted) if deleted
                                                               else np.zeros(0, np.int64))
            tensors[f"table_{table_id}_keys"] = tf.constant(np.concatenate(keys) if keys else np.zeros(0, np.int64))
            tensors[f"table_{table_id}_values"] = tf.constant(np.concatenate(values) if values
                                                              else np.zeros((0, width), np.float32))
        with self._update_lock:
            return int(self._update(tensors)["applied"].numpy())


def _tensor(values: List, dtype: tf.DType) -> tf.Tensor:
    if dtype == tf.string:
        return tf.constant([v if isinstance(v, (str, bytes)) else str(v) for v in values], tf.string)
    if dtype == tf.int64:
        array = np.array(values)
        if array.dtype.kind not in "iu" and not (array.dtype.kind == "U" and all(str(v).lstrip("-").isdigit()
                                                                                  for v in values)):
            raise ValueError("not integers")
        return tf.constant(array.astype(np.int64), tf.int64, shape=[len(values)])
    array = np.array(values, dtype=np.float32)
    return tf.constant(array, tf.float32, shape=[len(values)])
