"""Export and the serving processor, end to end: real broker, real TF/TFRA, real HTTP on 127.0.0.1.

Export and serving run as subprocesses, as users run them (TFRA's inference
mode, which export switches on, is process-global).
"""
import collections
import http.client
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import json_format

from easyonline.updates.param_ids import read_parameter_ids
from easyonline.publish.publish_callback import IncrementalPublish
from easyonline.updates.codec import UpdateSnapshot, decode_update, encode_update
from easyonline.updates.directory_sink import DirectorySink
from easyonline.updates.readers import update_file_name
from easyonline.export.layout import newest_version
from easyonline.serve.loaded_export import LoadedExport
from easyonline.serve.process import ServingProcess
from easyonline.tools.local_broker import LocalBroker
from easyonline.tools.stream_producer import SyntheticCtrStream, input_field_names, produce
from easyonline.utils.net import free_port
from easyonline.core.callbacks import Callback
from easyonline.jobs.online_train import build_trainer
from easyonline.utils import preloaded_python
from tests.conftest import PYTHON, TEST_TABLES, online_config, python_env
from tests.fake_oss import FakeOss
from tests.log_noise import foreign_lines

FIELDS = input_field_names()  # the stream's columns


# A processor that knows only TensorFlow (and kafka-python to read): TFRA is imported to register its ops,
# nothing of easyonline. It applies the published messages through incr_update_message_sig, then predicts.
TF_ONLY_PROCESSOR = r"""
import json, sys
import tensorflow as tf
import tensorflow_recommenders_addons  # noqa: F401  (registers TFRA's ops)
from kafka import KafkaConsumer, TopicPartition
version, requests = sys.argv[1], json.load(open(sys.argv[2]))
info = json.load(open(version + "/assets/incr_update.txt"))
model = tf.saved_model.load(version)
consumer = KafkaConsumer(bootstrap_servers=info["server"], enable_auto_commit=False, consumer_timeout_ms=30000)
partition = TopicPartition(info["topic"], 0)
consumer.assign([partition])
consumer.seek(partition, info["offset"])
end = consumer.end_offsets([partition])[partition]
messages = []
for record in (consumer if end > info["offset"] else []):  # every message to the end of the topic as it stands
    messages.append(record.value)
    if record.offset + 1 >= end:
        break
applied = {"messages": 0}
for start in range(0, len(messages), 16):
    out = model.signatures["incr_update_message_sig"](messages=tf.constant(messages[start:start + 16]))
    applied = {"messages": applied["messages"] + len(messages[start:start + 16]),
               "last_sequence": int(out["last_sequence"]), "last_global_step": int(out["last_global_step"])}
serve = model.signatures["serving_default"]
specs = serve.structured_input_signature[1]
inputs = {name: tf.constant([row[name] for row in requests], dtype=spec.dtype) for name, spec in specs.items()}
probs = serve(**inputs)["probs"].numpy().tolist()
assert not [m for m in sys.modules if m.startswith("easyonline")]
print(json.dumps({**applied, "probs": probs}))
"""


def instances(lines):
    """TF Serving "instances" rows from CSV sample lines (numbers as numbers, ids as strings), of the inputs
    of online_config's model (its first TEST_TABLES categorical features)."""
    inputs = [n for n in FIELDS[1:] if n.startswith("I") or int(n[1:]) <= TEST_TABLES]
    rows = []
    for line in lines:
        values = dict(zip(FIELDS, line.decode().split(",")))
        rows.append({n: (float(values[n]) if n.startswith("I") else values[n]) for n in inputs})
    return rows


def trainer_probs(trainer, lines):
    parsed = trainer.parser.parse(lines)
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    logits, = trainer.model(parsed.features, training=False).values()
    return tf.sigmoid(logits).numpy()


def export(model_dir, export_dir, *flags):
    proc = preloaded_python.run([PYTHON, "-m", "easyonline.export", f"--config={model_dir}/pipeline.config",
                           f"--export_dir={export_dir}", *flags], env=python_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not foreign_lines(proc.stderr), proc.stderr[-3000:]  # no TensorFlow/TFRA noise in what export logs
    return proc.stdout.strip().splitlines()[-1]


def Server(export_dir, log_path, *flags):  # pylint: disable=invalid-name
    return ServingProcess(str(export_dir), str(log_path), "--status_secs=1", *flags, model_name="m", env=python_env())


class Count(Callback):
    def __init__(self):
        self.samples = 0

    def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
        self.samples += parsed_batch.size


def _wait(condition, timeout):
    deadline = time.time() + timeout
    while not condition() and time.time() < deadline:
        time.sleep(0.2)
    return condition()


def test_served_predictions_follow_training_and_match_the_trainer(broker, topic, tmp_path):
    broker.create_topic(topic, 2)
    stream = SyntheticCtrStream()
    produce(broker.bootstrap, topic, stream.chunks(0, 1500), partitions=2)
    model_dir = tmp_path / "m"
    config = online_config(model_dir, broker.bootstrap, topic, **{
        "data_config.batch_size": 250, "data_config.batch_timeout_ms": 200, "train_config.save_checkpoints_steps": 4,
        "train_config.save_checkpoints_secs": 0, "train_config.log_step_count_secs": 2,
        "train_config.incr_save_config": {"sparse_save_secs": 1, "dense_save_secs": 1,
                                          "kafka": {"server": broker.bootstrap, "topic": topic + "_updates"}}})
    count = Count()
    trainer = build_trainer(config, online=True, callbacks=[count])
    thread = threading.Thread(target=trainer.run, daemon=True)
    thread.start()
    lines = list(stream.lines(50000, 20))  # samples never trained on; many of their ids are known
    requests = instances(lines)
    server = None
    try:
        assert _wait(lambda: count.samples >= 1500 and trainer.last_checkpoint, 120)
        export_dir = tmp_path / "export"
        version = export(model_dir, export_dir, "--update_signatures=unsigned")  # (a trainer without a secret)
        assets = os.path.join(version, "assets")
        assert sorted(os.listdir(assets)) == ["DENSE_UPDATE_VARIABLES", "dense_shapes.json", "embed_name_to_ids.txt",
                                              "incr_update.txt", "pipeline.config", "predictions.json"]
        assert json.load(open(os.path.join(assets, "predictions.json"))) == ["probs"]  # one binary task
        shapes = json.load(open(os.path.join(assets, "dense_shapes.json")))
        dense_ids = json.load(open(os.path.join(assets, "DENSE_UPDATE_VARIABLES")))
        assert sorted(shapes) == sorted(str(i) for i in dense_ids.values()) and shapes[str(dense_ids["bias"])] == []
        info = json.load(open(os.path.join(assets, "incr_update.txt")))
        assert info["storage"] == "kafka" and info["topic"] == topic + "_updates" and info["stream_id"] > 0
        # the SavedModel's signature defs, as TensorFlow's loader (and saved_model_cli) read them from saved_model.pb
        # (read here: saved_model_cli, a TensorFlow process of its own, cost ~6 s of CPU to print the same keys)
        from tensorflow.python.saved_model import loader_impl  # pylint: disable=g-import-not-at-top
        shown = loader_impl.parse_saved_model(version).meta_graphs[0].signature_def
        assert {"serving_default", "incr_update_sig", "incr_update_message_sig"} <= set(shown), sorted(shown)
        server = Server(export_dir, tmp_path / "serve.log")
        before = server.predict(requests)
        produce(broker.bootstrap, topic, stream.chunks(1500, 1000), partitions=2)
        assert _wait(lambda: count.samples >= 2500, 120)
        # Served predictions change while the trainer keeps training (no reload, updates only).
        deadline = time.time() + 60
        while np.allclose(server.predict(requests), before, atol=1e-6) and time.time() < deadline:
            time.sleep(0.5)
        assert not np.allclose(server.predict(requests), before, atol=1e-6)
    except BaseException:
        if server is not None:
            server.stop()
        raise
    finally:
        trainer.stop("test done")
        thread.join(120)
    tf_only = None
    try:
        publish = next(c for c in trainer.callbacks if isinstance(c, IncrementalPublish))
        last = publish.publisher.last_acked.last_sequence
        status = server.wait_for(lambda s: s["last_applied_sequence"] == last and s["update_lag_messages"] == 0)
        assert status["last_applied_step"] == trainer.step and status["refused_updates"] == {}
        expected = trainer_probs(trainer, lines)
        np.testing.assert_allclose(server.predict(requests), expected, atol=1e-5)
        metrics = urllib.request.urlopen(server.url("/metrics"), timeout=10).read().decode()
        assert f"easyonline_serving_last_applied_sequence {last}" in metrics
        types = dict(line.split()[2:4] for line in metrics.splitlines() if line.startswith("# TYPE "))
        assert len(types) > 8 and all((kind == "counter") == name.endswith("_total") for name, kind in types.items())
        assert types["easyonline_serving_predict_latency_seconds"] == "histogram"
        served = int(float(re.search(r"^easyonline_serving_predict_latency_seconds_count (\S+)$", metrics, re.M)[1]))
        assert served >= 1 and 'easyonline_serving_predict_latency_seconds_bucket{le="0.01"}' in metrics
        # The export applies the stream as published, in TensorFlow alone: the same predictions (a process
        # of its own, running while the server restarts; its answer is checked after).
        (tmp_path / "requests.json").write_text(json.dumps(requests))
        tf_only = subprocess.Popen([PYTHON, "-c", TF_ONLY_PROCESSOR, version, str(tmp_path / "requests.json")],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # A restart loads the same export, replays the stream from its recorded position: same state.
        assert server.stop() == 0
        server = Server(export_dir, tmp_path / "serve2.log")
        server.wait_for(lambda s: s["last_applied_sequence"] == last)
        np.testing.assert_allclose(server.predict(requests), expected, atol=1e-5)
        out, err = tf_only.communicate(timeout=300)
        assert tf_only.returncode == 0, err[-3000:]
        processed = json.loads(out.strip().splitlines()[-1])
        assert processed["messages"] > 0 and processed["last_sequence"] == last
        assert processed["last_global_step"] == trainer.step
        np.testing.assert_allclose(processed["probs"], expected, atol=1e-5)
    finally:
        if tf_only is not None and tf_only.poll() is None:
            tf_only.kill()
        server.stop()


def one_row_update(trainer, ids, model_name, sequence, line, stream_id, value=0.5, full_sync=False, dense=None):
    """An update message of stream ``stream_id`` that sets the C1 row of ``line``'s id to ``value`` everywhere
    (and writes ``dense``, {id: array}, if given)."""
    table_id, width = ids.tables["C1"]
    key = int(trainer.parser.parse([line]).features["C1"].numpy()[0])
    snapshot = UpdateSnapshot(trainer.step + 1, time.time(), {}, dense=dense or {}, full_sync=full_sync,
                              rows={table_id: (np.array([key], np.int64), np.full((1, width), value, np.float32))})
    return encode_update(snapshot, model_name, sequence, 10**6 + sequence, 1 << 20, {table_id: width}, stream_id)[0]


@pytest.fixture(scope="module")
def served_from_files(tmp_path_factory):
    """A model trained from a file, publishing to incr_save_dir, exported and served."""
    tmp_path = tmp_path_factory.mktemp("files")
    data = tmp_path / "train.csv"
    data.write_bytes(b"\n".join(SyntheticCtrStream().lines(0, 3000)) + b"\n")
    updates = tmp_path / "updates"
    config = online_config(tmp_path / "m", **{
        "data_config.batch_size": 500, "train_config.save_checkpoints_secs": 0,
        "train_config.incr_save_config": {"sparse_save_steps": 2, "dense_save_steps": 2,
                                          "fs": {"incr_save_dir": str(updates)}}})
    config.ClearField("kafka_train_input")
    config.file_train_input.paths.append(str(data))
    trainer = build_trainer(config, online=False)
    trainer.run()
    export(tmp_path / "m", tmp_path / "export", f"--embedding_export_dir={tmp_path / 'vectors'}",
           "--update_signatures=unsigned")  # the update signatures, unsigned: their mechanics are tested here
    server = Server(tmp_path / "export", tmp_path / "serve.log", "--max_request_bytes=20000",
                    "--idle_timeout_secs=2", "--max_rows_per_request=20", "--grpc_port=0")
    # caught up with the trainer's messages: the tests number theirs after the server's last_applied_sequence
    # (read earlier, a test run first could write over messages not applied yet)
    newest = max(s for _, s in _file_numbers(updates))
    server.wait_for(lambda s: s["last_applied_sequence"] == newest)
    yield trainer, server, updates, read_parameter_ids(str(tmp_path / "m")), tmp_path
    server.stop()


def _file_numbers(updates):
    """(stream, sequence) of the message files in ``updates``."""
    return [(int(n[7:27]), int(n[28:40])) for n in os.listdir(updates) if n.endswith(".pb")]


def _readiness(server):
    """(HTTP status, body) of serve's readiness endpoint."""
    try:
        with urllib.request.urlopen(server.url("/ready"), timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_file_updates_duplicates_gaps_and_garbage_are_handled(served_from_files):
    trainer, server, updates, ids, _ = served_from_files
    requests = list(SyntheticCtrStream().lines(0, 5))
    expected = trainer_probs(trainer, requests)
    np.testing.assert_allclose(server.predict(instances(requests)), expected, atol=1e-5)
    status = server.status()
    last, stream = status["last_applied_sequence"], status["update_stream_id"]
    assert last == max(s for _, s in _file_numbers(updates))
    code, ready = _readiness(server)
    assert code == 200 and ready["ready"] and ready["behind"] is None and ready["seconds_since_update"] >= 0

    def write(sequence_in_name, data):
        path = updates / update_file_name(sequence_in_name, stream)
        path.write_bytes(data)
        (updates / (update_file_name(sequence_in_name, stream) + ".done")).write_bytes(b"")

    def message(sequence):
        return one_row_update(trainer, ids, status["model_name"], sequence, requests[0], stream)

    duplicate = (updates / update_file_name(last, stream)).read_bytes()
    write(last + 1, duplicate)                      # an old sequence again: skipped
    write(last + 2, b"\x08\x96garbage\xff")          # not an UpdateMessage: refused
    write(last + 3, message(last + 1)[:-7])         # truncated: refused
    write(last + 4, message(last + 5))              # out of order (a gap): refused, the cursor moves past it
    status = server.wait_for(lambda s: s["skipped_updates"] >= 1 and sum(s["refused_updates"].values()) >= 3)
    assert status["refused_updates"] == {"malformed": 2, "gap": 1}, status
    assert status["last_applied_sequence"] == last + 5  # past the gap: the next one is expected
    np.testing.assert_allclose(server.predict(instances(requests)), expected, atol=1e-5)  # nothing applied
    assert not status["ready"] and _readiness(server)[0] == 503  # it knows messages were lost
    write(last + 5, message(last + 6))              # the one after the gap: applied, though still behind
    status = server.wait_for(lambda s: s["last_applied_sequence"] == last + 6)
    assert status["behind"] == "malformed"  # the first cause it met
    changed = server.predict(instances(requests))
    assert abs(changed[0] - expected[0]) > 1e-4  # the row of its C1 id was replaced


def test_dense_entries_write_whole_parameters_slices_and_nothing_they_do_not_carry(served_from_files):
    """A message's dense entries as trainers send them: a parameter whole, one split in two entries (a message over
    max_message_bytes splits a parameter) or across two messages, and parameters a message does not carry, which
    stay as they are; through both update functions of an export (tensors, as easyonline.serve applies; serialized
    messages, incr_update_message_sig, as TF Serving's followers apply). The export is loaded in this process to
    read its variables (it saves them in name order)."""
    from easyonline.protos import update_pb2  # pylint: disable=g-import-not-at-top
    _, _, _, ids, tmp_path = served_from_files
    rng = np.random.default_rng(7)

    def message(sequence, *entries):
        out = update_pb2.UpdateMessage()
        out.header.sequence = sequence
        for param_id, shape, offset, values in entries:
            out.dense.add(id=param_id, shape=shape, offset=offset, values=values.astype(np.float32).tobytes())
        return out

    for path in ("tensors", "messages"):
        export = LoadedExport(newest_version(str(tmp_path / "export")))
        variables = dict(zip(sorted(ids.dense), export._module.dense_variables))  # pylint: disable=protected-access

        def apply(*messages, export=export):
            if path == "tensors":
                for m in messages:
                    export.apply(m)
            else:
                export.run_update_signature("incr_update_message_sig", {"messages": np.array(
                    [m.SerializeToString() for m in messages], object)})

        def held():
            return {name: v.numpy().reshape(-1).copy() for name, v in variables.items()}

        sizes = {name: v.shape.num_elements() for name, v in variables.items()}
        split = max(sizes, key=sizes.get)  # a kernel
        whole = next(name for name in sorted(sizes) if name != split and sizes[name] > 1)
        shape = {name: list(variables[name].shape) for name in (split, whole)}
        before = held()
        new_whole, new_split = rng.standard_normal(sizes[whole]), rng.standard_normal(sizes[split])
        half = sizes[split] // 2 + 1
        apply(message(1, (ids.dense[whole], shape[whole], 0, new_whole),
                      (ids.dense[split], shape[split], 0, new_split[:half])))
        after = held()
        np.testing.assert_array_equal(after[whole], new_whole.astype(np.float32))
        np.testing.assert_array_equal(after[split][:half], new_split[:half].astype(np.float32))
        np.testing.assert_array_equal(after[split][half:], before[split][half:])  # not yet sent
        for name in set(sizes) - {whole, split}:
            np.testing.assert_array_equal(after[name], before[name])  # not carried: as it was
        apply(message(2, (ids.dense[split], shape[split], half, new_split[half:])))  # the rest, a message later
        np.testing.assert_array_equal(held()[split], new_split.astype(np.float32))
        again = rng.standard_normal(sizes[split])
        apply(message(3, (ids.dense[split], shape[split], half, again[half:]),  # two entries of one message, the
                      (ids.dense[split], shape[split], 0, again[:half])))     # second half first
        final = held()
        np.testing.assert_array_equal(final[split], again.astype(np.float32))
        np.testing.assert_array_equal(final[whole], new_whole.astype(np.float32))


def _full_sync(trainer, ids, model, first_sequence, stream, max_bytes=1 << 20):
    """The trainer's full state as the publisher sends a full sync (every row, every dense parameter)."""
    from easyonline.publish.snapshot import take_snapshot  # pylint: disable=g-import-not-at-top
    from easyonline.updates.param_ids import dense_variables  # pylint: disable=g-import-not-at-top
    dense = trainer.read_variables({ids.dense[n]: v for n, v in dense_variables(trainer.model).items()})
    snapshot = take_snapshot(trainer.table_rows(), ids, trainer.step, time.time(), dict(trainer.positions), dense,
                             {}, {}, full_sync=True)
    return encode_update(snapshot, model, first_sequence, 10**7 + first_sequence, max_bytes,
                         {i: w for i, w in ids.tables.values()}, stream)


def test_a_refused_update_does_not_stop_the_next_and_a_full_sync_makes_the_server_equal_again(served_from_files):
    """Issue 4 and 5: messages after a refused one (a NaN, a dense shape of another model) are applied; the
    server says it is behind (/ready 503, metrics) until a full sync of the trainer's real state, which also
    removes a row the trainer does not have; then its predictions equal the trainer's."""
    trainer, server, updates, ids, _ = served_from_files
    requests = list(SyntheticCtrStream().lines(0, 5))
    fields = requests[0].split(b",")
    novel = b",".join(fields[:14] + [b"heal0novel"] + fields[15:])  # a C1 id the trainer has not seen
    status = server.status()
    last, stream, model = status["last_applied_sequence"], status["update_stream_id"], status["model_name"]

    def write(data):
        sequence = decode_update(data).header.sequence
        (updates / update_file_name(sequence, stream)).write_bytes(data)
        (updates / (update_file_name(sequence, stream) + ".done")).write_bytes(b"")

    if not status["ready"]:  # behind after the gap of the test before: a full sync first
        for data in _full_sync(trainer, ids, model, last + 1, stream):
            write(data)
        status = server.wait_for(lambda s: s["ready"], timeout=60)
        last = status["last_applied_sequence"]
    refused_before = collections.Counter(status["refused_updates"])
    write(one_row_update(trainer, ids, model, last + 1, requests[0], stream,
                         dense={ids.dense["bias"]: np.array(np.nan, np.float32)}))          # NaN: refused
    write(one_row_update(trainer, ids, model, last + 2, novel, stream, value=0.7))         # a row the trainer lacks
    write(one_row_update(trainer, ids, model, last + 3, requests[0], stream,
                         dense={ids.dense["bias"]: np.ones(3, np.float32)}))               # another shape: refused
    write(one_row_update(trainer, ids, model, last + 4, requests[0], stream, value=0.5))   # applied
    status = server.wait_for(lambda s: s["last_applied_sequence"] == last + 4)
    assert collections.Counter(status["refused_updates"]) - refused_before == {"inconsistent": 2}
    assert status["behind"] == "inconsistent" and _readiness(server)[0] == 503
    served = server.predict(instances(requests + [novel]))
    wanted = trainer_probs(trainer, requests + [novel])
    assert abs(served[0] - wanted[0]) > 1e-4 and abs(served[-1] - wanted[-1]) > 1e-4
    with urllib.request.urlopen(server.url("/metrics"), timeout=10) as r:
        metrics = r.read().decode()
    for reason in ("gap", "other_stream", "failed", "inconsistent", "malformed", "retention"):
        assert f'easyonline_serving_refused_updates_total{{reason="{reason}"}}' in metrics, reason
    assert "easyonline_serving_behind 1" in metrics and "easyonline_serving_seconds_since_update " in metrics

    sync = _full_sync(trainer, ids, model, last + 5, stream, max_bytes=64 * 1024)
    assert len(sync) > 1  # several parts: the rows are removed only at the last
    for data in sync:
        write(data)
    status = server.wait_for(lambda s: s["ready"], timeout=60)
    assert status["last_applied_sequence"] == last + 4 + len(sync) and status["removed_by_full_sync"] >= 1
    np.testing.assert_allclose(server.predict(instances(requests + [novel])), wanted, atol=1e-5)
    assert _readiness(server)[0] == 200


def test_a_server_whose_start_retention_deleted_is_behind_until_a_full_sync(served_from_files):
    """Issue 6: a server started from an export whose following messages are gone (the directory writer's
    retention deleted them) knows it is behind (/ready 503, refused reason retention) instead of silently
    missing rows, and the trainer's next full sync makes it equal to the trainer."""
    trainer, first_server, updates, ids, tmp_path = served_from_files
    status = first_server.status()
    last, stream, model = status["last_applied_sequence"], status["update_stream_id"], status["model_name"]
    start = json.loads(next((tmp_path / "export").glob("*/assets/incr_update.txt")).read_text())["sequence"]
    line = SyntheticCtrStream().lines(0, 1)[0]
    for sequence in range(last + 1, last + 5):  # four more updates of the stream (the server applies them)
        data = one_row_update(trainer, ids, model, sequence, line, stream, value=0.1 * (sequence - last))
        (updates / update_file_name(sequence, stream)).write_bytes(data)
        (updates / (update_file_name(sequence, stream) + ".done")).write_bytes(b"")
    first_server.wait_for(lambda s: s["last_applied_sequence"] == last + 4)
    last += 4
    assert DirectorySink(str(updates), retention_messages=3).clean() > 0  # what the writer does after a send
    assert min(s for _, s in _file_numbers(updates)) > start  # the export's start is gone
    server = Server(tmp_path / "export", tmp_path / "serve2.log")
    try:
        status = server.wait_for(lambda s: s["update_lag_messages"] == 0)
        assert not status["ready"] and status["behind"].startswith("retention") and \
            status["refused_updates"].get("retention") == 1, status
        assert _readiness(server)[0] == 503
        for data in _full_sync(trainer, ids, model, last + 1, stream, max_bytes=64 * 1024):
            sequence = decode_update(data).header.sequence
            (updates / update_file_name(sequence, stream)).write_bytes(data)
            (updates / (update_file_name(sequence, stream) + ".done")).write_bytes(b"")
        status = server.wait_for(lambda s: s["ready"], timeout=60)
        assert status["full_syncs"] == 1 and _readiness(server)[0] == 200
        lines = list(SyntheticCtrStream().lines(0, 5))
        np.testing.assert_allclose(server.predict(instances(lines)), trainer_probs(trainer, lines), atol=1e-5)
    finally:
        assert server.stop() == 0


def test_updates_of_another_stream_or_with_bad_values_are_refused_and_a_new_stream_takes_over(served_from_files):
    """A message of another stream of the model is not taken for a duplicate, NaN and unknown dense
    parameters are refused (and serving says it is stale), a message of another stream while the own one goes
    on is logged as two live trainers of one model, and a new stream's full sync is followed."""
    trainer, server, updates, ids, _ = served_from_files
    requests = list(SyntheticCtrStream().lines(0, 5))
    status = server.status()
    last, stream, model = status["last_applied_sequence"], status["update_stream_id"], status["model_name"]
    assert stream, status  # the trainer's stream has an identity
    refused_before = collections.Counter(status["refused_updates"])
    before = server.predict(instances(requests))

    def write(data):
        header = decode_update(data).header
        (updates / update_file_name(header.sequence, header.stream_id)).write_bytes(data)
        (updates / (update_file_name(header.sequence, header.stream_id) + ".done")).write_bytes(b"")

    def update(sequence, stream_id, **kwargs):
        return one_row_update(trainer, ids, model, sequence, requests[0], stream_id, **kwargs)

    write(update(last + 1, stream, dense={ids.dense["bias"]: np.array(np.nan, np.float32)}))
    write(update(last + 2, stream, dense={999: np.ones(1, np.float32)}))
    write(update(last + 3, stream, dense={ids.dense["bias"]: np.ones(3, np.float32)}))  # bias is a scalar
    write(update(1, stream + 1))  # another stream, low numbers: not a duplicate, refused
    status = server.wait_for(lambda s: sum(s["refused_updates"].values()) >= sum(refused_before.values()) + 4)
    assert collections.Counter(status["refused_updates"]) - refused_before == {"inconsistent": 3, "other_stream": 1}
    assert status["last_applied_sequence"] == last + 3 and status["update_stream_id"] == stream  # moved past
    assert status["update_lag_messages"] == 0 and status["update_lag_seconds"] > 0  # at the end, but stale
    np.testing.assert_allclose(server.predict(instances(requests)), before, atol=1e-6)  # nothing applied
    write(update(last + 4, stream, value=0.3))  # its own stream goes on: two live streams
    server.wait_for(lambda s: s["last_applied_sequence"] == last + 4)
    assert re.search(rf"two streams of model '{model}' are live on .*: {stream} \(followed\) and {stream + 1}",
                     server.log_tail(100000)), server.log_tail()
    write(update(2, stream + 1, value=0.25, full_sync=True))  # the new stream's full sync: followed
    status = server.wait_for(lambda s: s["update_stream_id"] == stream + 1)
    assert status["last_applied_sequence"] == 2
    server.wait_for(lambda s: s["update_lag_seconds"] == 0 and s["ready"])  # a whole full sync: equal again
    assert abs(server.predict(instances(requests))[0] - before[0]) > 1e-4


def test_bad_and_oversized_predict_requests_get_clear_errors(served_from_files):
    _, server, _, _, _ = served_from_files
    row = instances(SyntheticCtrStream().lines(0, 1))[0]
    assert server.post(b"{not json")[0] == 400
    code, body = server.post(json.dumps({"instances": [{k: v for k, v in row.items() if k != "C7"}]}).encode())
    assert code == 400 and "C7" in body["error"]
    code, body = server.post(json.dumps({"instances": [dict(row, I3="abc")]}).encode())
    assert code == 400 and "I3" in body["error"]
    code, body = server.post(json.dumps({"rows": []}).encode())
    assert code == 400 and "instances" in body["error"]
    code, body = server.post(json.dumps({"instances": [row] * 200}).encode())
    assert code == 413 and "max_request_bytes" in body["error"] and f"{len(json.dumps({'instances': [row] * 200}))} bytes" in body["error"]
    code, body = server.post(json.dumps({"inputs": {k: [v, v] for k, v in row.items()}}).encode())
    assert code == 200 and len(body["outputs"]["probs"]) == 2
    assert server.post(b"{}", name="other")[0] == 404
    metrics = urllib.request.urlopen(server.url("/metrics"), timeout=10).read().decode()
    assert 'easyonline_serving_requests_total{outcome="bad_request"} 4' in metrics
    assert 'easyonline_serving_requests_total{outcome="too_large"} 1' in metrics


def test_the_packed_serving_input_scores_as_the_named_signature_and_names_a_bad_input(served_from_files):
    """``serve_packed`` (one [inputs, rows] tensor per dtype: what easyonline.serve calls) scores exactly as the
    named function TF Serving calls and as an export without it (the per-input path). Values numpy does not
    take as they are still convert (digit strings for an int64) or are refused naming their input."""
    *_, tmp_path = served_from_files
    loaded = LoadedExport(newest_version(str(tmp_path / "export")))
    assert loaded._packed_call is not None  # pylint: disable=protected-access
    assert set(loaded._packing) == {"float32", "string"}  # pylint: disable=protected-access
    rows = instances(SyntheticCtrStream().lines(100, 7))
    inputs = {name: [row[name] for row in rows] for name in loaded.inputs}
    packed = loaded.predict(inputs)
    named = loaded._serve_concrete(  # pylint: disable=protected-access
        {name: tf.constant(values, loaded.inputs[name]) for name, values in inputs.items()})
    assert set(packed) == set(named) >= {"probs", "logits"} and len(packed["probs"]) == 7
    for name, values in named.items():
        np.testing.assert_array_equal(packed[name], values.numpy())
    loaded._packed_call = None  # pylint: disable=protected-access  (as an export made before serve_packed)
    for name, values in loaded.predict(inputs).items():
        np.testing.assert_array_equal(packed[name], values)
    loaded.inputs = {"a": tf.int64, "b": tf.int64}  # (int64 inputs: ids not read as strings)
    as_int64 = loaded._packed_tensor("int64", ["a", "b"], {"a": [1, 2], "b": ["3", "-4"]})  # pylint: disable=protected-access
    assert as_int64.dtype == tf.int64 and as_int64.numpy().tolist() == [[1, 2], [3, -4]]
    with pytest.raises(ValueError, match=r"input 'b': expected int64 values"):
        loaded._packed_tensor("int64", ["a", "b"], {"a": [1, 2], "b": [1.5, 2]})  # pylint: disable=protected-access


def test_metadata_versions_in_paths_and_signature_name_as_tf_serving_has_them(served_from_files):
    _, server, _, _, _ = served_from_files
    row = instances(SyntheticCtrStream().lines(0, 1))[0]
    version = server.status()["model_version_status"][0]["version"]
    with urllib.request.urlopen(server.url(f"/v1/models/m/versions/{version}/metadata"), timeout=10) as r:
        metadata = json.loads(r.read())
    assert metadata["model_spec"] == {"name": "m", "signature_name": "", "version": version}
    signatures = metadata["metadata"]["signature_def"]["signature_def"]
    assert set(signatures) == {"serving_default", "incr_update_sig", "incr_update_message_sig"}
    assert signatures["incr_update_message_sig"]["inputs"]["messages"]["dtype"] == "DT_STRING"
    serving = signatures["serving_default"]
    assert set(serving["inputs"]) == set(row) and set(serving["outputs"]) == {"probs", "logits"}
    assert serving["inputs"]["C1"]["dtype"] == "DT_STRING" and serving["inputs"]["I1"]["dtype"] == "DT_FLOAT"
    assert serving["inputs"]["C1"]["tensor_shape"] == {"dim": [{"size": "-1", "name": ""}], "unknown_rank": False}
    assert serving["method_name"] == "tensorflow/serving/predict"
    expected = server.predict([row])
    code, body = server.post(json.dumps({"signature_name": "serving_default", "instances": [row]}).encode(),
                             name=f"m/versions/{version}")
    assert code == 200 and body["predictions"][0]["probs"] == pytest.approx(expected[0], abs=1e-6)
    code, body = server.post(json.dumps({"signature_name": "incr_update_sig", "instances": [row]}).encode())
    assert code == 400 and "incr_update_sig" in body["error"]
    code, body = server.post(json.dumps({"instances": [row]}).encode(), name="m/versions/999")
    assert code == 404 and f"serving version {version}" in body["error"]


def _raw(server, data: bytes, timeout: float = 10) -> bytes:
    """Sends ``data`` on a new connection and reads the answer until the server closes it."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as conn:
        conn.sendall(data)
        chunks = []
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def test_http_keep_alive_timeouts_limits_and_bad_numbers(served_from_files):
    _, server, _, _, _ = served_from_files
    row = instances(SyntheticCtrStream().lines(0, 1))[0]
    path = "/v1/models/m:predict"
    # a negative Content-Length does not get around the size limit
    answer = _raw(server, f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{{}}".encode())
    assert answer.startswith(b"HTTP/1.1 400") and b"negative" in answer
    # a number no input type can hold is a 400, not a 500
    code, body = server.post(b'{"instances": [' + json.dumps(row)[:-1].encode() + b', "I3": ' + b"9" * 400 + b"}]}")
    assert code == 400 and "I3" in body["error"], body
    # more rows than --max_rows_per_request
    code, body = server.post(json.dumps({"inputs": {k: [v] * 21 for k, v in row.items()}}).encode())
    assert code == 413 and "max_rows_per_request" in body["error"]
    # HTTP/1.1 keep-alive: two requests on one connection
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    sockets = []
    for _ in range(2):
        conn.request("POST", path, json.dumps({"instances": [row]}), {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200 and response.version == 11 and not response.will_close
        sockets.append(conn.sock)
        assert len(json.loads(response.read())["predictions"]) == 1
    assert sockets[0] is sockets[1]  # the same connection served both
    conn.close()
    # an idle connection is closed after --idle_timeout_secs (2 s), as is one that stalls mid-request
    started = time.monotonic()
    assert _raw(server, b"") == b"" and 1.5 < time.monotonic() - started < 8
    started = time.monotonic()
    assert _raw(server, b"POST /v1/models/m:predict HTTP/1.1\r\nContent-Le") == b""
    assert time.monotonic() - started < 8
    # 300 slow clients, each holding a connection open mid-request (a byte every 0.3 s keeps it under the
    # 2 s stall timeout), do not keep a predict request waiting: with a pool of fewer threads than clients
    # the predict would wait as long as they trickle (until the 10 s client timeout), so no clock is needed
    slow = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(300)]
    trickling = threading.Event()
    trickling.set()

    def trickle():
        for conn in slow:
            conn.sendall(b"POST /v1/models/m:predict HTTP/1.1\r\nX-Slow: ")
        while trickling.is_set():
            for conn in slow:
                conn.sendall(b"a")
            time.sleep(0.3)

    trickler = threading.Thread(target=trickle, daemon=True)
    trickler.start()
    try:
        assert server.post(json.dumps({"instances": [row]}).encode())[0] == 200
        metrics = urllib.request.urlopen(server.url("/metrics"), timeout=10).read().decode()
        open_now = re.search(r"^easyonline_serving_open_connections (\S+)$", metrics, re.M)
        assert open_now and float(open_now.group(1)) >= 300, open_now  # all held while the predict was answered
    finally:
        trickling.clear()
        trickler.join(10)
        for conn in slow:
            conn.close()


def test_embedding_export_writes_every_table_exactly(served_from_files):
    trainer, _, _, _, tmp_path = served_from_files
    vectors = tmp_path / "vectors"
    assert (vectors / "DONE").exists()
    manifest = json.loads((vectors / "manifest.json").read_text())
    assert sorted(manifest["tables"]) == sorted(trainer.model.tables.embeddings)
    for name in trainer.model.tables.embeddings:
        keys, values = (t.numpy() for t in trainer.model.tables.rows(name).export())
        dim = trainer.model.tables.table_dim(name)
        lines = (vectors / name / "part-00000.tsv").read_text().splitlines()
        assert manifest["tables"][name] == {"rows": len(keys), "dim": dim} and len(lines) == len(keys)
        got = {int(k): np.array(v.split(","), np.float32) for k, v in (line.split("\t") for line in lines)}
        for key, row in zip(keys.tolist(), values):
            np.testing.assert_array_equal(got[key], row[:dim])  # bit-exact float32, embedding columns only


def test_an_export_traces_each_serving_function_once(served_from_files):
    """Tracing was most of an export's time: signatures given as functions traced before saving were traced
    again inside the save (another variable policy in TensorFlow's cache key), and the SavedModel held both."""
    from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=g-import-not-at-top
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString(next((served_from_files[4] / "export").glob("*/saved_model.pb")).read_bytes())
    traced = collections.Counter(re.sub(r"_\d+$", "", f.signature.name)
                                 for f in saved.meta_graphs[0].graph_def.library.function)
    functions = ("serve", "incr_update", "incr_update_messages", "score_features", "table_keys")
    assert {name: traced[f"__inference__{name}"] for name in functions} == dict.fromkeys(functions, 1), traced


def test_export_and_embeddings_to_oss(served_from_files):
    """oss:// export_dir and embedding_export_dir, against tests/fake_oss.py: no real OSS is reachable here."""
    _, _, _, _, tmp_path = served_from_files
    # Without credentials the export stops (exit 2) naming what is missing: a process of its own, run
    # meanwhile (it loads TensorFlow first), its answer checked at the end.
    no_credentials = preloaded_python.Popen([PYTHON, "-m", "easyonline.export", f"--config={tmp_path}/m/pipeline.config",
                                       "--export_dir=oss://models/export"],
                                      env={k: v for k, v in python_env().items() if not k.startswith("OSS_")},
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    with FakeOss() as fake:
        env = dict(python_env(), OSS_ENDPOINT=fake.endpoint, OSS_ACCESS_KEY_ID="test-id",
                   OSS_ACCESS_KEY_SECRET="test-secret-never-printed")
        proc = preloaded_python.run([PYTHON, "-m", "easyonline.export", f"--config={tmp_path}/m/pipeline.config",
                               "--export_dir=oss://models/export", "--embedding_export_dir=oss://models/vectors"],
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "test-secret-never-printed" not in proc.stdout + proc.stderr
        objects = fake.objects["models"]
        version = proc.stdout.strip().splitlines()[-1]
        assert version.startswith("oss://models/export/")
        prefix = version[len("oss://models/"):] + "/"
        assert {prefix + "saved_model.pb", prefix + "assets/incr_update.txt",
                prefix + "assets/embed_name_to_ids.txt"} <= set(objects)
        local = tmp_path / "vectors"
        for path in local.rglob("*"):
            if path.is_file() and path.name != "manifest.json":  # the manifest names its checkpoint
                assert objects["vectors/" + str(path.relative_to(local))] == path.read_bytes()
        assert "vectors/DONE" in objects
    stderr = no_credentials.communicate(timeout=300)[1]
    assert no_credentials.returncode == 2 and "OSS_ENDPOINT" in stderr


def test_tf_serving_grpc_clients_predict_and_read_metadata(served_from_files):
    """A client of TF Serving's gRPC API (tensorflow_serving.apis), unchanged: same model, same numbers."""
    import grpc  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from tensorflow_serving.apis import (get_model_metadata_pb2, predict_pb2,  # pylint: disable=g-import-not-at-top
                                         prediction_service_pb2_grpc)
    _, server, _, _, _ = served_from_files
    port = int(re.search(r"over gRPC on [\d.]+:(\d+)", server.log_tail(100000))[1])
    stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
    rows = instances(SyntheticCtrStream().lines(100, 3))
    request = predict_pb2.PredictRequest()
    request.model_spec.name = server.model_name
    request.model_spec.signature_name = "serving_default"
    for name in rows[0]:
        values = [row[name] for row in rows]
        request.inputs[name].CopyFrom(tf.make_tensor_proto(values, dtype=tf.float32 if name.startswith("I") else tf.string))
    response = stub.Predict(request, timeout=30)
    np.testing.assert_allclose(tf.make_ndarray(response.outputs["probs"]), server.predict(rows), atol=1e-6)
    assert response.model_spec.name == server.model_name and response.model_spec.version.value > 0

    request.model_spec.name = "other"
    with pytest.raises(grpc.RpcError) as e:
        stub.Predict(request, timeout=30)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    request.model_spec.name = server.model_name
    del request.inputs["C1"]
    with pytest.raises(grpc.RpcError) as e:
        stub.Predict(request, timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "C1" in e.value.details()

    metadata_request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    metadata_request.model_spec.name = server.model_name
    metadata = stub.GetModelMetadata(metadata_request, timeout=30)
    signatures = get_model_metadata_pb2.SignatureDefMap()
    metadata.metadata["signature_def"].Unpack(signatures)
    assert {"serving_default", "incr_update_sig", "incr_update_message_sig"} <= set(signatures.signature_def)
    assert signatures.signature_def["serving_default"].inputs["C1"].dtype == tf.string.as_datatype_enum
    # REST's metadata is the same SignatureDefs, as JSON (one source: saved_model.pb)
    with urllib.request.urlopen(server.url("/v1/models/m/metadata"), timeout=10) as r:
        rest = json.loads(r.read())["metadata"]["signature_def"]["signature_def"]
    assert rest == {name: json_format.MessageToDict(signature, preserving_proto_field_name=True,
                                                    including_default_value_fields=True)
                    for name, signature in signatures.signature_def.items()}

    # the same checks, and messages, as the REST API: the signature named, the row limit
    request.inputs["C1"].CopyFrom(tf.make_tensor_proto([row["C1"] for row in rows], dtype=tf.string))
    request.model_spec.signature_name = "incr_update_sig"  # a server following the stream takes no other writer
    with pytest.raises(grpc.RpcError) as e:
        stub.Predict(request, timeout=30)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "incr_update_sig" in e.value.details()
    assert "--follow_updates=false" in e.value.details()
    request.model_spec.signature_name = ""
    many = instances(SyntheticCtrStream().lines(0, 21))  # --max_rows_per_request=20
    for name in many[0]:
        request.inputs[name].CopyFrom(tf.make_tensor_proto([row[name] for row in many],
                                                           dtype=tf.float32 if name.startswith("I") else tf.string))
    with pytest.raises(grpc.RpcError) as e:
        stub.Predict(request, timeout=30)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "max_rows_per_request" in e.value.details()


def _grpc_stub(server):
    import grpc  # pylint: disable=g-import-not-at-top
    from tensorflow_serving.apis import prediction_service_pb2_grpc  # pylint: disable=g-import-not-at-top
    port = int(re.search(r"over gRPC on [\d.]+:(\d+)", server.log_tail(100000))[1])
    return prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))


def _address_space_limit(pid: int, spare: int = 2 << 30):
    """Caps the process's address space at its size now plus ``spare`` (soft limit only, so it can be lifted):
    a request that makes gigabytes fails its allocation at once instead of swapping the machine. Returns the
    limits to put back."""
    before = resource.prlimit(pid, resource.RLIMIT_AS)
    with open(f"/proc/{pid}/status") as f:
        size = int(re.search(r"VmSize:\s+(\d+) kB", f.read())[1]) * 1024
    resource.prlimit(pid, resource.RLIMIT_AS, (size + spare, before[1]))
    return before


def test_grpc_size_bombs_are_refused_before_any_tensor_is_built(served_from_files):
    """A TensorProto says its shape apart from its values, and TensorFlow's make_ndarray fills the shape: a
    tiny request declaring [2**31] values made gigabytes before the row limit was looked at. Each bomb is
    answered with an error naming the limit, and the server keeps serving correct predictions. The server
    runs with its address space capped (2 GiB over its size), so a regression fails at once."""
    import grpc  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from tensorflow_serving.apis import predict_pb2  # pylint: disable=g-import-not-at-top
    _, server, _, _, _ = served_from_files
    stub = _grpc_stub(server)
    rows = instances(SyntheticCtrStream().lines(200, 2))
    expected = server.predict(rows)

    def request(**replace):
        r = predict_pb2.PredictRequest()
        r.model_spec.name = server.model_name
        for name in rows[0]:
            r.inputs[name].CopyFrom(tf.make_tensor_proto([row[name] for row in rows],
                                                         dtype=tf.float32 if name.startswith("I") else tf.string))
        for name, proto in replace.items():
            r.inputs[name].CopyFrom(proto)
        return r

    def bomb(dtype, dims, **values):
        proto = tf.make_tensor_proto([], dtype=dtype)
        proto.tensor_shape.ClearField("dim")
        for d in dims:
            proto.tensor_shape.dim.add(size=d)
        for field, value in values.items():
            if field == "tensor_content":
                proto.tensor_content = value
            else:
                getattr(proto, field).extend(value)
        return proto

    bombs = [  # (input, proto, status, words the error must contain)
        ("I1", bomb(tf.float32, [2**31], float_val=[0.5]), "INVALID_ARGUMENT", "max_rows_per_request"),
        ("C1", bomb(tf.string, [2**20, 2**20, 2**20], string_val=[b"x"]), "INVALID_ARGUMENT", "max_rows_per_request"),
        ("I2", bomb(tf.float32, [2**31], tensor_content=b"\0\0\0\0"), "INVALID_ARGUMENT", "max_rows_per_request"),
        ("I3", bomb(tf.float32, [-5], float_val=[0.5]), "INVALID_ARGUMENT", "negative dimension"),
        ("I4", bomb(tf.float32, [2, -2**40], float_val=[0.5]), "INVALID_ARGUMENT", "negative dimension"),
        ("I5", bomb(tf.float32, [3], float_val=[0.5, 0.25]), "INVALID_ARGUMENT", "declares 3 values but it holds 2"),
        ("C2", bomb(tf.string, [2], string_val=[b"a", b"b", b"c"]), "INVALID_ARGUMENT", "declares 2 values"),
        ("I6", bomb(tf.complex64, [2], scomplex_val=[1, 2, 3, 4]), "INVALID_ARGUMENT", "dtype"),
        ("I7", bomb(tf.float32, [30], float_val=[0.5] * 30), "RESOURCE_EXHAUSTED", "max_rows_per_request"),
    ]
    limits = _address_space_limit(server.proc.pid)
    try:
        for name, proto, status, words in bombs:
            with pytest.raises(grpc.RpcError) as e:
                stub.Predict(request(**{name: proto}), timeout=60)
            assert e.value.code() == getattr(grpc.StatusCode, status) and words in e.value.details(), \
                (name, e.value.code(), e.value.details())
            response = stub.Predict(request(), timeout=60)  # and the server goes on answering, the same
            np.testing.assert_allclose(tf.make_ndarray(response.outputs["probs"]), expected, atol=1e-6)
        # a message over --max_request_bytes (20000 here) is refused by gRPC before it is parsed
        big = request(C3=tf.make_tensor_proto([b"x" * 30000, b"y"], dtype=tf.string))
        with pytest.raises(grpc.RpcError) as e:
            stub.Predict(big, timeout=60)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value.details()
    finally:
        resource.prlimit(server.proc.pid, resource.RLIMIT_AS, limits)
    assert server.proc.poll() is None
    np.testing.assert_allclose(server.predict(rows), expected, atol=1e-6)
    assert "Traceback" not in server.log_tail(100000)


def test_rest_bodies_nested_too_deeply_or_with_lists_for_values_get_400(served_from_files):
    """JSON has no declared shapes, but a body nested deeper than the decoder recurses was a 500 with a
    traceback in the log, and a list where a row's value goes reached numpy; both are 400s now, checked
    before any array is built, and the server goes on answering."""
    _, server, _, _, _ = served_from_files
    row = instances(SyntheticCtrStream().lines(0, 1))[0]
    expected = server.predict([row])
    deep = ('{"inputs": {"C1": ' + "[" * 5000 + "]" * 5000 + "}}").encode()  # under --max_request_bytes=20000
    code, body = server.post(deep)
    assert code == 400 and "nested too deeply" in body["error"], (code, body)
    code, body = server.post(json.dumps({"instances": [dict(row, I1=[[0.5, 0.5]])]}).encode())
    assert code == 400 and "'I1', row 0" in body["error"], (code, body)
    code, body = server.post(json.dumps({"inputs": dict({k: [v] for k, v in row.items()}, C2=[{"a": 1}])}).encode())
    assert code == 400 and "'C2', row 0" in body["error"], (code, body)
    code, body = server.post(json.dumps({"inputs": dict({k: [v] for k, v in row.items()}, I2=[0.5] * 21)}).encode())
    assert code == 413 and "max_rows_per_request" in body["error"], (code, body)
    np.testing.assert_allclose(server.predict([row]), expected, atol=1e-6)
    assert "predict failed" not in server.log_tail(100000)


def _export_following_kafka(base, export_dir, server: str):
    """A copy of the module's export (``base``/export) whose update stream is the Kafka topic "updates" of
    ``server`` from offset 0 instead of its incr_save_dir; its incr_update.txt as a dict."""
    version = max((base / "export").iterdir(), key=lambda p: p.name if p.name.isdigit() else "")
    shutil.copytree(version, export_dir / version.name)
    info_path = export_dir / version.name / "assets" / "incr_update.txt"
    info = json.loads(info_path.read_text())
    info = {**{k: v for k, v in info.items() if k != "incr_save_dir"}, "storage": "kafka", "server": server,
            "topic": "updates", "offset": 0}
    info_path.write_text(json.dumps(info))
    return info


def test_an_unreachable_then_frozen_update_broker_is_logged_in_easyonlines_words_and_followed(served_from_files, tmp_path):
    """kafka-python logs every failed connect (several ERROR lines a second) while the update broker is down,
    and the status said lag=None msgs/Nones. Now: one easyonline line per status period naming the broker,
    for how long and why, lag=unknown, no kafka line; once the broker is there, its updates are followed.
    The export is the module's, copied with its update stream moved to a Kafka topic on a port where
    nothing listens yet (a broker that comes up later: the local broker keeps no data across restarts).

    Then the same server and broker (one server start, not two): the broker frozen with SIGSTOP for ~25 s,
    predictions are answered, the log says so in easyonline's words only (no kafka-python line), and the next
    update is applied once it is back (training and exporting a model of its own took ~25 s and tested nothing
    more: what is served while the stream is unreachable, then the next update)."""
    trainer, _, _, ids, base = served_from_files
    port = free_port()
    info = _export_following_kafka(base, tmp_path / "export", f"127.0.0.1:{port}")
    server = Server(tmp_path / "export", tmp_path / "serve.log")
    broker = None
    try:
        outage = re.compile(rf"W easyonline\.serve\] update broker 127\.0\.0\.1:{port} unreachable for \d+ s "
                            r"\(connection refused\)")
        assert _wait(lambda: len(outage.findall(server.log_tail(10**6))) >= 4, 120), server.log_tail()
        log = server.log_tail(10**6)
        status_lines = [line for line in log.splitlines() if " I easyonline.serve] step=" in line]
        assert len(outage.findall(log)) <= len(status_lines)  # one a status period (--status_secs=1), no more
        assert status_lines and all("lag=unknown" in line for line in status_lines), status_lines
        assert "lag=None" not in log and "kafka.net" not in log and not re.search(r"^\S+ \S+ [EW] kafka", log, re.M)
        assert not foreign_lines(log), foreign_lines(log)
        line = SyntheticCtrStream().lines(0, 1)[0]
        before = server.predict(instances([line]))
        broker = LocalBroker(port=port, log_path=str(tmp_path / "broker.log")).start()
        broker.create_topic("updates", 1)
        from kafka import KafkaProducer  # pylint: disable=g-import-not-at-top
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
        message = one_row_update(trainer, ids, info["model_name"], info["sequence"], line, info.get("stream_id"))
        producer.send("updates", message, key=b"m", partition=0).get(timeout=30)
        producer.close()
        status = server.wait_for(lambda s: s["last_applied_sequence"] == info["sequence"], timeout=120)
        assert status["refused_updates"] == {}
        assert abs(server.predict(instances([line]))[0] - before[0]) > 1e-4
        shown = len(server.log_tail(10**6))
        assert _wait(lambda: re.search(r"lag=0 msgs/", server.log_tail(10**6)[shown:]), 60), server.log_tail()
        assert not outage.search(server.log_tail(10**6)[shown:])  # the outage is over: no more such lines

        # the broker frozen (SIGSTOP; the tansu broker loses its data on a restart) for ~25 s
        before = server.predict(instances([line]))
        shown = len(server.log_tail(10**6))
        broker.pause()
        try:
            for _ in range(40):  # predictions keep being answered while the stream is unreachable (~25 s)
                np.testing.assert_allclose(server.predict(instances([line])), before, atol=1e-6)
                time.sleep(0.6)
            # kafka-python's errors about the frozen broker (its connection aborted, fetches and metadata
            # refreshes timing out: 14 E lines in 50 s) are folded into easyonline's own outage line
            log = server.log_tail(10**6)[shown:]
            assert re.search(rf"W easyonline\.serve\] update broker {re.escape(broker.bootstrap)} unreachable "
                             r"for \d+ s \(timed out\)", log), log[-3000:]
            assert not re.search(r"^\S+ \S+ [EW] kafka\.", log, re.M), log[-3000:]
            assert not foreign_lines(log), foreign_lines(log)
        finally:
            broker.resume()
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
        producer.send("updates", one_row_update(trainer, ids, info["model_name"], info["sequence"] + 1, line,
                                                info.get("stream_id"), value=0.9), key=b"m", partition=0).get(30)
        producer.close()
        status = server.wait_for(lambda s: s["last_applied_sequence"] == info["sequence"] + 1, timeout=120)
        assert status["refused_updates"] == {}
        assert abs(server.predict(instances([line]))[0] - before[0]) > 1e-4
    finally:
        assert server.stop() == 0
        if broker is not None:
            broker.stop()
