"""One exported SavedModel version, loaded: predict from raw inputs, apply decoded update messages.

``predict`` returns every output of the export (every task's, under EasyRec's
names); ``prediction_names`` are the tasks' prediction outputs (``probs`` /
``y``, suffixed ``_<tower>`` in a multi-task model), the primary task's first,
as the export's pipeline.config builds them.

A reader of a normal export must import tensorflow_recommenders_addons
first: its tables are TFRA ops that stock TensorFlow does not know. An export
for stock serving (``for_stock_serving`` in incr_update.txt) uses core ops
only; loading it leaves TFRA unimported.
"""
import json
import os
import re
import threading
from typing import Dict, List, Optional

import numpy as np

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.flat_call import flat_call
from easyonline.export.export_info import ExportInfo
from easyonline.export.layout import (ASSETS_DIR, PACKED_SERVE_FUNCTION, PREDICTIONS_FILE, SAVED_MODEL_FILE,
                                      STOCK_SERVING_KEY, packed_inputs)
from easyonline.protos import update_pb2
from easyonline.serve.input_names import name_mismatch
from easyonline.updates.apply_rules import message_changes

tf = ensure_legacy_keras()
from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2  # noqa: E402  pylint: disable=g-import-not-at-top


def _refusal(message: str) -> str:
    """The informative part of TensorFlow's error for an input the graph refused: an assertion's text, else the
    first line that is not TensorFlow's framing ("Graph execution error:", "Detected at node ...")."""
    found = re.search(r"assertion failed: (.*)", message)
    if found:
        return found.group(1).replace("\\'", "'")[:500]
    lines = [line.strip() for line in message.split("\n") if line.strip()]
    useful = [line for line in lines if not line.startswith(("Graph execution error", "Detected at node", "File "))]
    return (useful or lines or [message])[0][:500]


class LoadedExport:
    def __init__(self, export_dir: str):
        info = ExportInfo.read(export_dir)
        self.info = info
        self.path, self.version = info.path, info.version
        self.update_info = info.update_info
        self.for_stock_serving = bool(self.update_info.get(STOCK_SERVING_KEY, False))
        if not self.for_stock_serving:
            import tensorflow_recommenders_addons  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
        self._module = tf.saved_model.load(self.path)
        # The module's own functions keep the exported input names as dict keys (signature argument
        # names are sanitized and lowercased); the signatures are there for saved_model_cli and TF Serving.
        # Called flat too: binding the ~80 tensors of an update to the restored function's signature took about
        # half of an update's application (7-9 ms -> 4-5 ms a message of 40 rows in 26 tables, this machine).
        self._update = flat_call(self._module.incr_update.concrete_functions[0])
        self._table_keys = getattr(self._module, "table_keys", None)  # exports before it existed lack it
        assets = os.path.join(self.path, ASSETS_DIR)
        self.ids = info.ids
        self.update_info = info.update_info
        self.pipeline_config = info.pipeline_config
        self.config = info.config
        # each task's prediction output, the primary task's first (what score_features and predict write)
        # (an export written before the file existed has one binary task)
        predictions = os.path.join(assets, PREDICTIONS_FILE)
        self.prediction_names: List[str] = json.load(open(predictions)) if os.path.exists(predictions) else ["probs"]
        # Predict calls the one concrete function directly: the restored tf.function would first match the
        # request's tensors against its traces (~0.3 ms of a batch-1 request with five inputs, more with more).
        self._serve_concrete = self._module.serve.concrete_functions[0]
        (raw_specs,), _ = self._serve_concrete.structured_input_signature
        self.inputs: Dict[str, tf.DType] = {name: spec.dtype for name, spec in raw_specs.items()}
        # Both are called flat (core/flat_call.py): that skips checking each tensor against the signature again (~0.3 ms
        # of a batch-1 request with 39 inputs); predict builds every tensor from self.inputs' dtypes, so the check
        # cannot fail there. Exports since 2026-11-29 also take the inputs packed, one tensor per dtype
        # (export/layout.py): predict then makes 1-3 tensors, not one per input.
        self._named_call = flat_call(self._serve_concrete)
        self._packing = packed_inputs(self.inputs)
        packed = getattr(self._module, PACKED_SERVE_FUNCTION, None)
        self._packed_call = flat_call(packed.concrete_functions[0]) if packed is not None else None
        self._widths = info.widths
        # The served dense shapes: an update's dense entries are checked against them, not only against
        # themselves (exports made before the file existed check the latter only).
        self._dense_shapes = info.dense_shapes
        # The update function's inputs for a message that changes nothing: apply replaces those of what the
        # message carries. Making all 3 tensors a table for every message cost ~4 ms of an update to 26 tables
        # (this machine), whatever the message held, and grew with the tables a model has.
        self._no_change = {"dense_ids": tf.zeros([0], tf.int64), "dense_offsets": tf.zeros([0], tf.int64),
                           "dense_lengths": tf.zeros([0], tf.int64), "dense_values": tf.zeros([0], tf.float32)}
        for table_id, width in self._widths.items():
            self._no_change.update({f"table_{table_id}_deleted": tf.zeros([0], tf.int64),
                                    f"table_{table_id}_keys": tf.zeros([0], tf.int64),
                                    f"table_{table_id}_values": tf.zeros([0, width], tf.float32)})
        self._update_lock = threading.Lock()
        self._signature_defs: Optional[Dict[str, meta_graph_pb2.SignatureDef]] = None
        self._input_defaults: Optional[Dict[str, object]] = None

    @property
    def signatures(self):
        """The SavedModel's signatures as TensorFlow Serving calls them (keyword inputs, sanitized names)."""
        return self._module.signatures

    def signature_defs(self) -> Dict[str, meta_graph_pb2.SignatureDef]:
        """The SignatureDefs saved_model.pb holds (what saved_model_cli shows), by name: the one source of
        the metadata both APIs answer (gRPC as protos, REST as their JSON)."""
        if self._signature_defs is None:
            saved_model = saved_model_pb2.SavedModel()
            with open(os.path.join(self.path, SAVED_MODEL_FILE), "rb") as f:
                saved_model.ParseFromString(f.read())
            self._signature_defs = {name: signature for name, signature
                                    in saved_model.meta_graphs[0].signature_def.items()
                                    if not name.startswith("__")}  # not TF's own (__saved_model_init_op)
        return self._signature_defs

    @property
    def input_defaults(self) -> Dict[str, object]:
        """The inputs a predict request may leave out: each with a ``default_val`` in the config's
        data_config.input_fields, by name, as the value it stands for (what training reads for an empty field)."""
        if self._input_defaults is None:
            self._input_defaults = input_defaults(self.config, self.inputs)
        return self._input_defaults

    def predict(self, inputs: Dict[str, List]) -> Dict[str, np.ndarray]:
        """``inputs``: one equally long list per input; an input with a default_val may be left out (its default
        for every row). Raises ValueError naming a bad or missing input."""
        defaults = self.input_defaults
        mismatch = name_mismatch(inputs, self.inputs, defaults)
        if mismatch:
            left_out = f" (those with a default_val may be left out: {sorted(defaults)})"
            raise ValueError(mismatch + (left_out if mismatch.startswith("missing") else ""))
        sizes = {len(v) for v in inputs.values()}
        if len(sizes) != 1:
            raise ValueError(f"inputs have different lengths {sorted(sizes)}")
        left_out = set(self.inputs) - set(inputs)
        if left_out:
            rows = sizes.pop()
            inputs = dict(inputs, **{name: [defaults[name]] * rows for name in left_out})
        try:
            if self._packed_call is not None:
                out = self._packed_call({dtype: self._packed_tensor(dtype, names, inputs)
                                         for dtype, names in self._packing.items()})
            else:
                out = self._named_call({name: self._input_tensor(name, inputs) for name in self.inputs})
        except tf.errors.InvalidArgumentError as e:  # a value the model refuses, e.g. a vector of the wrong length
            raise ValueError(_refusal(e.message)) from None
        return {name: value.numpy() for name, value in out.items()}

    def _input_tensor(self, name: str, inputs: Dict[str, List]) -> tf.Tensor:
        """One input's [rows] tensor; ValueError naming the input when its values are not of its type."""
        dtype = self.inputs[name]
        try:
            return _tensor(inputs[name], dtype)
        except (TypeError, ValueError, OverflowError) as e:  # e.g. an int over int64
            raise ValueError(f"input {name!r}: expected {dtype.name} values ({e})") from None

    def _packed_tensor(self, dtype: str, names: List[str], inputs: Dict[str, List]) -> tf.Tensor:
        """The [len(names), rows] tensor of ``names``' values (all of type ``dtype``), made at once; values numpy
        does not take as they are (digit strings for an int64, a list as a value) go through ``_input_tensor``,
        which converts what it can and names the input it cannot."""
        if dtype == "string":
            return tf.constant([[v if isinstance(v, (str, bytes)) else str(v) for v in inputs[name]]
                                for name in names], tf.string)
        try:
            array = np.array([inputs[name] for name in names], dtype=np.float32 if dtype == "float32" else None)
        except (TypeError, ValueError, OverflowError):
            array = None
        if array is None or array.ndim != 2 or (dtype == "int64" and array.dtype.kind not in "iu"):
            return tf.stack([self._input_tensor(name, inputs) for name in names])
        return tf.constant(array, tf.as_dtype(dtype))

    @property
    def primary_output(self) -> str:
        """The primary task's prediction output (``probs``, ``y``, ``probs_<tower>`` or ``y_<tower>``)."""
        return self.prediction_names[0]

    def score_features(self, features) -> np.ndarray:
        """The primary task's predictions (a probability, or a regression's value) for already parsed features
        (the export's pipeline.config parser's output)."""
        return self._module.score_features(features)[self.primary_output].numpy()

    def predictions(self, features) -> Dict[str, np.ndarray]:
        """Every task's predictions for parsed features, by output name in ``prediction_names`` order."""
        out = self._module.score_features(features)
        return {name: out[name].numpy() for name in self.prediction_names}

    def apply(self, message: update_pb2.UpdateMessage) -> int:
        """Applies one decoded message by the rules of updates/apply_rules.py; returns the entries applied.

        Raises ValueError, before anything is applied, when an entry does not fit this export.
        """
        dense, tables = message_changes(message, self._widths, self._dense_shapes)
        tensors = dict(self._no_change)  # what the message leaves alone: made once (~40 us a tensor)
        if dense:
            tensors.update(dense_ids=tf.constant([w.id for w in dense], tf.int64),
                           dense_offsets=tf.constant([w.offset for w in dense], tf.int64),
                           dense_lengths=tf.constant([len(w.values) for w in dense], tf.int64),
                           dense_values=tf.constant(np.concatenate([w.values for w in dense])))
        carried = {}  # (an empty array keeps its input made once)
        for table_id, changes in tables.items():
            for part, array in (("deleted", changes.deleted), ("keys", changes.keys), ("values", changes.rows)):
                if len(array):
                    carried[f"table_{table_id}_{part}"] = array
        tensors.update(_split_tensors(carried))
        with self._update_lock:
            try:
                return int(self._update(tensors)["applied"].numpy())
            except tf.errors.OpError as e:  # checked above; a message that still breaks the graph is refused too
                raise ValueError(f"the update function refused the message: {e.message}") from None


    @property
    def table_widths(self) -> Dict[int, int]:
        """Floats per row of each table, by table id."""
        return dict(self._widths)

    @property
    def dense_shapes(self) -> Dict[int, List[int]]:
        """The shape of each dense parameter, by id."""
        return dict(self._dense_shapes)

    def run_update_signature(self, name: str, inputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Runs the update signature ``name`` (incr_update_sig, incr_update_message_sig) as TF Serving runs any
        signature: inputs and outputs by their names in the SignatureDef; under the lock every update and
        row listing takes. Raises ValueError naming a bad input (the graph's refusal included)."""
        expected = self.signature_defs()[name].inputs
        missing = sorted(set(expected) - set(inputs))
        if missing:
            raise ValueError(f"signature {name!r}: missing input(s) {missing}; it takes {sorted(expected)}")
        unknown = sorted(set(inputs) - set(expected))
        if unknown:
            raise ValueError(f"signature {name!r}: unknown input(s) {unknown}; it takes {sorted(expected)}")
        tensors = {}
        for key, array in inputs.items():
            dtype = tf.as_dtype(expected[key].dtype)
            try:
                tensors[key] = tf.constant(array, dtype)
            except (TypeError, ValueError) as e:
                raise ValueError(f"signature {name!r}: input {key!r} is not {dtype.name} ({e})") from None
        with self._update_lock:
            try:
                out = self._module.signatures[name](**tensors)
            except (tf.errors.OpError, TypeError, ValueError) as e:  # a shape the signature does not take, a
                text = e.message if isinstance(e, tf.errors.OpError) else str(e)  # message the graph refuses
                raise ValueError(f"signature {name!r} refused the request: {_refusal(text)}") from None
        return {key: value.numpy() for key, value in out.items()}

    @property
    def can_list_rows(self) -> bool:
        """False for exports made before table_keys existed: a full sync then cannot remove rows."""
        return self._table_keys is not None

    def held_keys(self) -> Dict[int, np.ndarray]:
        """The keys each table holds now, by table id."""
        if self._table_keys is None:
            raise ValueError(f"the export {self.path} cannot list its rows (exported before table_keys existed)")
        with self._update_lock:
            out = self._table_keys()
        return {int(name.split("_", 1)[1]): keys.numpy() for name, keys in out.items()}

    def remove_rows(self, keys: Dict[int, np.ndarray]) -> int:
        """Removes ``keys`` ({table id: int64 keys}) from the tables; the number of keys asked to remove."""
        message = update_pb2.UpdateMessage()
        for table_id, table_keys in keys.items():
            if len(table_keys):
                message.sparse.add(table_id=table_id, dim=self._widths[table_id],
                                   deleted_keys=np.ascontiguousarray(table_keys, np.int64).tobytes())
        if len(message.sparse):
            self.apply(message)
        return sum(len(k) for k in keys.values())


def input_defaults(config, inputs: Dict[str, tf.DType]) -> Dict[str, object]:
    """{input: its default_val as a value of the input's dtype} for the served inputs whose
    data_config.input_fields entry has a default_val (a string input: the text itself)."""
    out: Dict[str, object] = {}
    for field in config.data_config.input_fields:
        if field.input_name not in inputs or not field.HasField("default_val"):
            continue
        dtype = inputs[field.input_name]
        try:
            if dtype == tf.string:
                out[field.input_name] = field.default_val
            elif dtype.is_integer:
                out[field.input_name] = int(float(field.default_val))
            elif field.default_val:
                out[field.input_name] = float(field.default_val)
        except ValueError:  # (validate.py refuses a numeric field's default that is not a number)
            continue
    return out


def _split_tensors(arrays: Dict[str, np.ndarray]) -> Dict[str, tf.Tensor]:
    """``arrays`` as tensors, made a few eager ops in all: those of one dtype and row shape are joined, made one
    tensor and split (one tensor each took ~40 us, ~2 ms of an update's 52 arrays for 26 tables, this machine;
    joined and split ~0.5 ms)."""
    groups: Dict[tuple, List[str]] = {}
    for name, array in arrays.items():
        groups.setdefault((array.dtype.str, array.shape[1:]), []).append(name)
    out = {}
    for names in groups.values():
        if len(names) == 1:
            out[names[0]] = tf.constant(arrays[names[0]])
            continue
        joined = tf.constant(np.concatenate([arrays[name] for name in names]))
        out.update(zip(names, tf.split(joined, [len(arrays[name]) for name in names])))
    return out


def _tensor(values: List, dtype: tf.DType) -> tf.Tensor:
    """One input's values as the [B] tensor the serving function takes.

    Built from a 1-D array of the right type, without ``tf.constant``'s ``shape`` (a reshape op of its own:
    it doubled the ~30 us each of a request's 39 inputs cost, most of a batch-1 predict's time).
    """
    if dtype == tf.string:
        return tf.constant([v if isinstance(v, (str, bytes)) else str(v) for v in values], tf.string)
    if dtype == tf.int64:
        array = np.array(values)
        if array.dtype.kind not in "iu" and not (array.dtype.kind == "U" and all(str(v).lstrip("-").isdigit()
                                                                                  for v in values)):
            raise ValueError("not integers")
        array = array.astype(np.int64)
    else:
        array = np.array(values, dtype=np.float32)
    if array.ndim != 1:
        raise ValueError(f"one value per row expected, got an array of shape {list(array.shape)}")
    return tf.constant(array, dtype)
