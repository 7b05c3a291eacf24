"""The tf.Module that is exported: raw features in, every task's outputs out; updates applied in place.

``serve`` takes one tensor per raw input field (strings, ints or floats as the
config declares them), turns them into ids exactly as the trainer's parser
does (the same ``parsed_features``), and runs the model in inference mode, where an
unknown id looks up as zeros and creates nothing. It returns every task's
outputs under EasyRec's names (``Model.task_outputs``): ``probs`` and
``logits`` for one binary task, ``y`` for one regression, ``probs_<tower>``,
``logits_<tower>`` and ``y_<tower>`` for a multi-task model's towers;
``score_features`` (parsed features in) returns the same. ``serve`` stacks its
inputs into one tensor per dtype and calls ``serve_packed``, which holds the
model: easyonline.serve calls that directly (three tensors to make for a
request instead of one per input; export/layout.py's ``packed_inputs``).

``incr_update`` applies one decoded update message: for every embedding table
its deleted keys, then its upserted rows; for dense parameters, slices of
their flattened values at an offset, as the UpdateMessage carries them. The
inputs are named by the ids in ``DENSE_UPDATE_VARIABLES`` and
``embed_name_to_ids.txt``, so serving never needs the trainer's variable
names.

``table_keys`` lists the keys each table holds (``table_<id>`` -> int64 keys),
so that a serving processor can remove the rows a completed full sync did not
carry (docs/incremental_updates.md).

``incr_update_messages`` applies update messages as they were published
(serialized UpdateMessages, one per string, in stream order), decoding them in
the graph (``tf.io.decode_proto`` with the message descriptors embedded), so a
processor that knows only TensorFlow applies the stream: read a message from
Kafka, call the signature. It also answers ``previous_sequence``, the last
sequence it applied before the call since the model was loaded (-1: none,
as a reloaded export says): with no messages, a question that changes
nothing, which tells a caller whether the server kept what it was sent.
"""
from typing import Any, Dict, Optional, Tuple

from google.protobuf import descriptor_pb2

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.export.layout import packed_inputs
from easyonline.features.csv_parser import parsed_features
from easyonline.features.feature_spec import FeatureSpecs
from easyonline.features.signature import feature_signature
from easyonline.protos import pipeline_pb2, update_pb2
from easyonline.updates.param_ids import ParameterIds, dense_variables
from easyonline.updates.signing import MAC_INPUT, verified_inputs, verified_messages

tf = ensure_legacy_keras()

_FT = pipeline_pb2.DataConfig.FieldType


def raw_input_specs(specs: FeatureSpecs) -> Dict[str, tf.TensorSpec]:
    """One input per raw field a feature reads: its config type, a string for fields split into several ids or
    holding a vector raw feature's numbers, a float for bucketized numbers and raw features."""
    types = {f.name: f.field_type for f in specs.input_fields}
    split = {name for feature in specs.id_features for name in feature.split_inputs}
    out = {}
    for feature in specs.id_features:
        for name in feature.input_names:
            if name in split or types[name] == _FT.STRING:
                dtype = tf.string
            elif feature.boundaries:
                dtype = tf.float32
            else:
                dtype = tf.int64
            out[name] = tf.TensorSpec([None], dtype, name=name)
    for feature in specs.raw_features:  # a vector's numbers come as one string per sample, as in training
        out[feature.input_name] = tf.TensorSpec([None], tf.string if feature.is_vector else tf.float32,
                                                name=feature.input_name)
    return dict(sorted(out.items()))


def update_input_specs(ids: ParameterIds) -> Dict[str, tf.TensorSpec]:
    """The inputs of incr_update_sig (see the module docstring and docs/serving.md)."""
    specs = {
        "dense_ids": tf.TensorSpec([None], tf.int64, name="dense_ids"),
        "dense_offsets": tf.TensorSpec([None], tf.int64, name="dense_offsets"),
        "dense_lengths": tf.TensorSpec([None], tf.int64, name="dense_lengths"),
        "dense_values": tf.TensorSpec([None], tf.float32, name="dense_values"),
    }
    for _, (table_id, width) in sorted(ids.tables.items(), key=lambda kv: kv[1][0]):
        specs[f"table_{table_id}_keys"] = tf.TensorSpec([None], tf.int64, name=f"table_{table_id}_keys")
        specs[f"table_{table_id}_values"] = tf.TensorSpec([None, width], tf.float32, name=f"table_{table_id}_values")
        specs[f"table_{table_id}_deleted"] = tf.TensorSpec([None], tf.int64, name=f"table_{table_id}_deleted")
    return specs


def _descriptor_source() -> bytes:
    """update.proto's descriptors, inline: the exported graph decodes messages without any file."""
    files = descriptor_pb2.FileDescriptorSet()
    update_pb2.DESCRIPTOR.CopyToProto(files.file.add())
    return b"bytes://" + files.SerializeToString()


def _decode(serialized, message: str, fields, types):
    """``tf.io.decode_proto`` of ``easyonline.protos.<message>``; returns one tensor per field."""
    _, values = tf.io.decode_proto(serialized, f"easyonline.protos.{message}", fields, types,
                                   descriptor_source=_descriptor_source())
    return values


def _first(values, default):
    """[n, 0 or 1] values of a singular field (0: absent in every message, as proto3 leaves defaults out) -> [n]."""
    return tf.concat([values, tf.fill([tf.shape(values)[0], 1], default)], axis=1)[:, 0]


def _joined(chunks, dtype):
    """Little-endian arrays (bytes) concatenated and decoded as one 1-D tensor."""
    return tf.io.decode_raw(tf.strings.reduce_join(chunks), dtype)


class _Hidden:
    """Objects held out of tf.Module's tracking: the saved object graph does not reach them through here."""

    def __init__(self, **objects):
        self.__dict__.update(objects)


class ServingModule(tf.Module):
    """Wraps a trained model (models/base.py) for export; build it after ``de.enable_inference_mode()``.

    ``tables`` (name -> table, e.g. export/core_tables.py's): the tables serving reads and updates instead of
    the model's TFRA ones, so the SavedModel holds no TFRA op or resource (an export for stock TensorFlow
    Serving). Either way the module saves only the tables and the dense variables, not the Keras model.
    """

    def __init__(self, model, specs: FeatureSpecs, ids: ParameterIds, tables: Optional[Dict[str, Any]] = None,
                 update_key: Optional[Tuple[int, int]] = None):
        """``update_key`` (updates/signing.py): also build ``incr_update_signed`` and
        ``incr_update_messages_signed``, which apply nothing unless the MAC checks out under that key."""
        super().__init__(name="easyonline_serving")
        dense = dense_variables(model)
        self._scorer = _Hidden(model=model)
        if tables is None:
            tables = {name: layer.params for name, layer in model.tables.embeddings.items()}
        else:
            model.tables.serve_from(tables)
        # What the functions capture, tracked so the SavedModel saves them (lists: ids are not names). Not the
        # Keras model itself: tf_keras would trace every layer's call for its own SavedModel metadata, which
        # took ~80% of an export's time and is never loaded (serving calls the signatures).
        self.dense_variables = [dense[name] for name in sorted(dense)]
        self.tables = [tables[name] for name in sorted(tables)]
        self._specs = specs
        # Plain tuples of (id, object) behind a non-trackable holder: the lists above track these objects
        # already, and a dict with int keys cannot be tracked.
        self._params = _Hidden(dense=tuple(sorted((ids.dense[n], v) for n, v in dense.items())),
                               tables=tuple(sorted((ids.tables[n][0], table) for n, table in tables.items())))
        raw_specs = raw_input_specs(specs)
        # The model is traced once, in serve_packed (what easyonline.serve calls); serve, the named signature TF
        # Serving and saved_model_cli call, packs its inputs and calls it.
        self._packing = _Hidden(inputs=packed_inputs({name: spec.dtype for name, spec in raw_specs.items()}))
        self.serve_packed = tf.function(self._serve_packed, autograph=False, input_signature=[{
            dtype: tf.TensorSpec([len(names), None], tf.as_dtype(dtype), name=f"packed_{dtype}")
            for dtype, names in self._packing.inputs.items()}])
        self.serve = tf.function(self._serve, input_signature=[raw_specs], autograph=False)
        self.incr_update = tf.function(self._incr_update, input_signature=[update_input_specs(ids)],
                                       autograph=False)
        self._widths = {table_id: width for _, (table_id, width) in ids.tables.items()}
        self.incr_update_messages = tf.function(
            self._incr_update_messages, autograph=False,
            input_signature=[{"messages": tf.TensorSpec([None], tf.string, name="messages")}])
        # The sequence of the last message incr_update_message_sig applied since the model was loaded (-1:
        # none). Saved as -1, so a server that reloaded its export (restarted) answers -1: a feeder such as
        # tools/tfserving_follower.py tells a dropped connection (the server still holds what it acknowledged)
        # from a server that lost what it was sent, which TF Serving's API does not otherwise say.
        self.applied_sequence = tf.Variable(tf.constant(-1, tf.int64), trainable=False, name="applied_sequence")
        self.table_keys = tf.function(self._table_keys, input_signature=[], autograph=False)
        self._key = _Hidden(value=update_key)
        if update_key is not None:  # the signed forms, for the update signatures of a signed export
            self.incr_update_signed = tf.function(
                self._incr_update_signed, autograph=False,
                input_signature=[{**update_input_specs(ids), MAC_INPUT: tf.TensorSpec([], tf.int64, name=MAC_INPUT)}])
            self.incr_update_messages_signed = tf.function(
                self._incr_update_messages_signed, autograph=False,
                input_signature=[{"messages": tf.TensorSpec([None], tf.string, name="messages")}])
        # Parsed features in, for callers that parse with the config's parser (easyonline.predict).
        self.score_features = tf.function(self._score_features, input_signature=[feature_signature(specs)],
                                          autograph=False)

    @staticmethod
    def features_of(specs: FeatureSpecs, inputs):
        """Model features from raw inputs, exactly as the trainer's parser makes them (a weighted tag value the
        parser would reject is dropped here: serving scores every request; a bad vector raw feature is refused
        with its cause)."""
        return parsed_features(specs, inputs.__getitem__, serving=True)[0]

    def _serve(self, inputs):
        return self.serve_packed({dtype: tf.stack([inputs[name] for name in names])
                                  for dtype, names in self._packing.inputs.items()})

    def _serve_packed(self, packed):
        inputs = {}
        for dtype, names in self._packing.inputs.items():
            inputs.update(zip(names, tf.unstack(packed[dtype], num=len(names))))
        return self._score_features(self.features_of(self._specs, inputs))

    def _score_features(self, features):
        model = self._scorer.model
        return model.task_outputs(model(features, training=False))

    def _incr_update(self, inputs):
        applied = []
        for table_id, table in self._params.tables:
            deleted = inputs[f"table_{table_id}_deleted"]
            keys, values = inputs[f"table_{table_id}_keys"], inputs[f"table_{table_id}_values"]
            removed = table.remove(deleted)
            with tf.control_dependencies([removed]):  # deletes first: an update never deletes a row it sends
                applied.append(table.upsert(keys, values))
        applied.extend(self._apply_dense(inputs["dense_ids"], inputs["dense_offsets"], inputs["dense_lengths"],
                                         inputs["dense_values"]))
        with tf.control_dependencies(applied):
            return {"applied": tf.size(inputs["dense_ids"], tf.int64) + sum(
                tf.size(inputs[f"table_{t}_keys"], tf.int64) for t, _ in self._params.tables)}

    def _incr_update_signed(self, inputs):
        with tf.control_dependencies([verified_inputs(inputs, self._key.value)]):  # nothing runs before it
            return self._incr_update({name: tf.identity(value) for name, value in inputs.items() if name != MAC_INPUT})

    def _incr_update_messages_signed(self, inputs):
        _, check = verified_messages(inputs["messages"], self._key.value)
        with tf.control_dependencies([check]):  # every message's MAC, before any is applied
            return self._incr_update_messages({"messages": tf.identity(inputs["messages"])})

    def _table_keys(self):
        return {f"table_{table_id}": table.export()[0] for table_id, table in self._params.tables}

    def _apply_dense(self, ids, offsets, lengths, values):
        """Writes dense slices: entry i puts ``lengths[i]`` values (from ``values``, entries back to back) into
        the flattened parameter ``ids[i]`` at ``offsets[i]``.

        A parameter the entries leave alone is not written, and one an entry carries whole (what the trainer
        sends unless a message is split) is assigned as it is: the scatter of every value, the general case, took
        ~3 ms of an update of DeepFM's 63k dense floats (this machine), and wrote the parameters it did not
        change too."""
        applied = []
        starts = tf.cumsum(lengths, exclusive=True)  # where each entry's values begin in dense_values
        for param_id, variable in self._params.dense:
            mine = tf.reshape(tf.where(tf.equal(ids, param_id)), [-1])
            at = tf.gather(offsets, mine)
            count = tf.gather(lengths, mine)
            begin = tf.gather(starts, mine)
            size = variable.shape.num_elements()

            def written_whole(variable=variable, begin=begin, size=size):
                with tf.control_dependencies([variable.assign(tf.reshape(values[begin[0]:begin[0] + size],
                                                                         variable.shape))]):
                    return tf.constant(True)

            def written_in_slices(variable=variable, at=at, count=count, begin=begin):
                into = tf.ragged.range(at, at + count).flat_values
                source = tf.ragged.range(begin, begin + count).flat_values
                updated = tf.tensor_scatter_nd_update(tf.reshape(variable, [-1]), into[:, None],
                                                      tf.gather(values, source))
                with tf.control_dependencies([variable.assign(tf.reshape(updated, tf.shape(variable)))]):
                    return tf.constant(True)

            carried = tf.size(mine)  # entries of this parameter in the message
            whole = tf.logical_and(tf.equal(carried, 1), tf.logical_and(tf.equal(tf.reduce_sum(at), 0),
                                                                       tf.equal(tf.reduce_sum(count), size)))
            applied.append(tf.cond(tf.equal(carried, 0), lambda: tf.constant(False),
                                   lambda w=written_whole, s=written_in_slices, c=whole: tf.cond(c, w, s)))
        return applied

    def _apply_message(self, message):
        """Applies one serialized UpdateMessage: per table its deleted keys, then its rows; then dense slices.
        Returns (entries applied, the message's sequence, its global step)."""
        header, dense, sparse = _decode(message, "UpdateMessage", ["header", "dense", "sparse"], [tf.string] * 3)
        sequence, step = _decode(header, "UpdateHeader", ["sequence", "global_step"], [tf.uint64, tf.int64])
        table_ids, keys, values, deleted = _decode(sparse, "SparseEntry", ["table_id", "keys", "values", "deleted_keys"],
                                                   [tf.uint32, tf.string, tf.string, tf.string])
        table_ids = tf.cast(_first(table_ids, tf.constant(0, tf.uint32)), tf.int64)
        keys, values, deleted = (_first(x, "") for x in (keys, values, deleted))
        applied, count = [], tf.constant(0, tf.int64)
        for table_id, table in self._params.tables:
            mine = tf.equal(table_ids, table_id)
            table_keys = _joined(tf.boolean_mask(keys, mine), tf.int64)
            rows = tf.reshape(_joined(tf.boolean_mask(values, mine), tf.float32), [-1, self._widths[table_id]])
            removed = table.remove(_joined(tf.boolean_mask(deleted, mine), tf.int64))
            with tf.control_dependencies([removed]):
                applied.append(table.upsert(table_keys, rows))
            count += tf.size(table_keys, tf.int64)
        dense_ids, offsets, dense_values = _decode(dense, "DenseEntry", ["id", "offset", "values"],
                                                   [tf.uint32, tf.uint64, tf.string])
        dense_values = _first(dense_values, "")
        applied.extend(self._apply_dense(tf.cast(_first(dense_ids, tf.constant(0, tf.uint32)), tf.int64),
                                         tf.cast(_first(offsets, tf.constant(0, tf.uint64)), tf.int64),
                                         tf.cast(tf.strings.length(dense_values) // 4, tf.int64),
                                         _joined(dense_values, tf.float32)))
        with tf.control_dependencies(applied):
            return (count + tf.size(dense_ids, tf.int64), tf.cast(tf.reshape(sequence, [-1])[0], tf.int64),
                    tf.reshape(step, [-1])[0])

    def _incr_update_messages(self, inputs):
        messages = inputs["messages"]

        def body(i, applied, _sequence, _step):
            count, sequence, step = self._apply_message(messages[i])
            return i + 1, applied + count, sequence, step  # i + 1 waits for the message: applied in order

        previous = self.applied_sequence.read_value()  # before this call's messages (auto control deps order it)
        zero = tf.constant(0, tf.int64)
        _, applied, sequence, step = tf.while_loop(lambda i, *_: i < tf.size(messages), body,
                                                   [tf.constant(0), zero, zero - 1, zero - 1], parallel_iterations=1)
        # an empty call changes nothing: it asks what the model holds
        held = self.applied_sequence.assign(tf.where(tf.size(messages) > 0, sequence, previous))
        with tf.control_dependencies([held]):
            return {"applied": tf.identity(applied), "last_sequence": tf.identity(sequence),
                    "last_global_step": tf.identity(step), "previous_sequence": tf.identity(previous)}
