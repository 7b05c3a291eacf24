"""``export --for_stock_serving``: a SavedModel in TensorFlow core ops only, loaded where TFRA never is.

One model is trained from a file, publishing updates to a directory; both
export kinds are made from an early checkpoint of it, so the messages
published after it are updates the exports have not seen. Each export is
read in a fresh process (the stock one asserting TFRA never loads and its
graph has no op this TensorFlow does not know); both must agree, before and
after the same messages, with each other and with the trainer.
"""
import json
import os
import subprocess
import time

import numpy as np
import pytest

from easyonline.checkpoint.restore import restore_model
from easyonline.jobs.online_train import build_trainer
from easyonline.tools.stream_producer import SyntheticCtrStream
from easyonline.updates.codec import UpdateSnapshot, encode_update
from easyonline.updates.param_ids import read_parameter_ids
from easyonline.updates.readers import list_update_files, update_file_name
from easyonline.updates.signing import UpdateSigner
from easyonline.utils import preloaded_python
from tests.conftest import PYTHON, online_config, python_env
from tests.integration.test_export_serve import Server, instances, trainer_probs
from tests.log_noise import foreign_lines

SECRET_VAR, SECRET = "EASYONLINE_STOCK_TEST_SECRET", "stock test secret"

# Reads one export version as a TensorFlow Serving user would: predicts through serving_default, applies the
# published messages through incr_update_message_sig (first half) and incr_update_sig (through LoadedExport,
# second half), then one message deleting keys; prints every prediction and the keys each table holds. The stock
# export is also loaded and updated the way TensorFlow Serving does (a TF1 session).
READER = r"""
import json, sys
from easyonline.serve.loaded_export import LoadedExport
from easyonline.updates.codec import decode_update
import tensorflow as tf
version, requests, messages, delete = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3])), \
    sys.argv[4]
export = LoadedExport(version)
serve = export.signatures["serving_default"]
specs = serve.structured_input_signature[1]
inputs = {name: tf.constant([row[name] for row in requests], dtype=spec.dtype) for name, spec in specs.items()}
out = {"before": serve(**inputs)["probs"].numpy().tolist(), "outputs": sorted(serve(**inputs))}
data = [open(path, "rb").read() for path in messages]
half = len(data) // 2
applied = export.signatures["incr_update_message_sig"](messages=tf.constant(data[:half]))
out["last_sequence"] = int(applied["last_sequence"])
for message in data[half:]:
    export.apply(decode_update(message))
out["after"] = serve(**inputs)["probs"].numpy().tolist()
out["rest"] = export.predict({name: [row[name] for row in requests] for name in specs})["probs"].tolist()
export.signatures["incr_update_message_sig"](messages=tf.constant([open(delete, "rb").read()]))
out["deleted"] = serve(**inputs)["probs"].numpy().tolist()
out["keys"] = {str(t): sorted(k.tolist()) for t, k in export.held_keys().items()}
out["stock"] = export.for_stock_serving
out["tfra_modules"] = [m for m in sys.modules if m.startswith("tensorflow_recommenders_addons")]
if export.for_stock_serving:  # every op the SavedModel uses is one this TensorFlow (without TFRA) has
    from tensorflow.core.protobuf import saved_model_pb2
    from tensorflow.python.framework import op_def_registry
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString(open(version + "/saved_model.pb", "rb").read())
    ops = set()
    for graph in saved.meta_graphs:
        ops |= {op.name for op in graph.meta_info_def.stripped_op_list.op} | {n.op for n in graph.graph_def.node}
        ops |= {n.op for f in graph.graph_def.library.function for n in f.node_def}
    out["ops"] = sorted(ops)
    out["unknown_ops"] = sorted(op for op in ops if op_def_registry.get(op) is None)
    # As TensorFlow Serving loads it (C++ LoadSavedModel: a session, the saver's restore, the init op) and calls
    # it (a signature's tensors by name): predict, apply every published message, predict.
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], version)
        predict, update = meta.signature_def["serving_default"], meta.signature_def["incr_update_message_sig"]
        feed = {predict.inputs[name].name: [row[name] for row in requests] for name in specs}
        out["session_before"] = session.run(predict.outputs["probs"].name, feed).tolist()
        session.run(update.outputs["applied"].name, {update.inputs["messages"].name: data})
        out["session_after"] = session.run(predict.outputs["probs"].name, feed).tolist()
print(json.dumps(out))
"""


# Several exports of one model in one fresh process: what ``python -m easyonline.export`` runs
# (export_saved_model on the loaded, validated config), once per export, so the exports share one TensorFlow
# import (~5 s CPU each) instead of a process each. The CLI itself is tested by test_export_serve's export().
EXPORTS = r"""
import json, os, sys, time
from easyonline.config import load_pipeline_config
from easyonline.config.validate import validate_pipeline_config
from easyonline.export.exporter import export_saved_model
from easyonline.utils.logs import setup_logging
setup_logging("INFO")
version = "0"
for config_path, export_dir, flags in json.loads(sys.argv[1]):
    while int(time.time()) <= int(version):  # a later export, a later version (its name is the unix time)
        time.sleep(0.1)
    config = load_pipeline_config(config_path)  # afresh each time: the export edits it (apply_oss_config)
    validate_pipeline_config(config, online=False)
    path = export_saved_model(config, export_dir, flags.get("checkpoint_path"), None,
                              flags.get("for_stock_serving", False), flags.get("update_signatures", ""))
    version = os.path.basename(path)
    print(path, flush=True)
"""


def export_in_one_process(model_dir, *exports):
    """Each (export_dir, {checkpoint_path, for_stock_serving, update_signatures}) of ``model_dir``'s model
    (or, with a third item, of that model_dir's), exported in order by one process, as the export command's
    flags of those names would; their version paths."""
    jobs = [(f"{export[2] if len(export) > 2 else model_dir}/pipeline.config", str(export[0]), export[1])
            for export in exports]
    proc = preloaded_python.run([PYTHON, "-c", EXPORTS, json.dumps(jobs)], preload="trainer",
                                env=python_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not foreign_lines(proc.stderr), proc.stderr[-3000:]  # no TensorFlow/TFRA noise in what export logs
    versions = proc.stdout.strip().splitlines()[-len(exports):]
    assert len(versions) == len(exports) and all(os.path.isdir(v) for v in versions), proc.stdout[-3000:]
    return versions


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(trainer, tmp_path, normal version, stock version): both exported from checkpoint 2 of a 6-step run."""
    tmp_path = tmp_path_factory.mktemp("stock")
    # the trainer signs its updates (a ${NAME} secret): the exports' update signatures check each MAC in the graph
    os.environ[SECRET_VAR] = SECRET
    data = tmp_path / "train.csv"
    data.write_bytes(b"\n".join(SyntheticCtrStream().lines(0, 3000)) + b"\n")
    config = online_config(tmp_path / "m", **{
        "data_config.batch_size": 500, "train_config.save_checkpoints_secs": 0,
        "train_config.save_checkpoints_steps": 2, "train_config.keep_checkpoint_max": 5,
        "train_config.incr_save_config": {"sparse_save_steps": 1, "dense_save_steps": 1,
                                          "signing_secret": "${" + SECRET_VAR + "}",
                                          "fs": {"incr_save_dir": str(tmp_path / "updates")}}})
    config.ClearField("kafka_train_input")
    config.file_train_input.paths.append(str(data))
    trainer = build_trainer(config, online=False)
    trainer.run()
    checkpoint = str(tmp_path / "m" / "model.ckpt-2")
    normal, stock = export_in_one_process(tmp_path / "m", (tmp_path / "export", {"checkpoint_path": checkpoint}),
                                          (tmp_path / "stock", {"checkpoint_path": checkpoint,
                                                                "for_stock_serving": True}))
    yield trainer, tmp_path, normal, stock
    os.environ.pop(SECRET_VAR, None)


def test_stock_export_predicts_and_updates_without_tfra_like_the_normal_one(exported):
    trainer, tmp_path, normal, stock = exported
    info = json.load(open(os.path.join(stock, "assets", "incr_update.txt")))
    assert info["for_stock_serving"] is True and info["step"] == 2
    assert json.load(open(os.path.join(normal, "assets", "incr_update.txt")))["for_stock_serving"] is False
    assert sorted(os.listdir(os.path.join(stock, "assets"))) == sorted(os.listdir(os.path.join(normal, "assets")))
    lines = list(SyntheticCtrStream().lines(50000, 20))  # never trained on: some ids known, some not
    (tmp_path / "requests.json").write_text(json.dumps(instances(lines)))
    updates = tmp_path / "updates"
    (stream, sequences), = list_update_files(str(updates)).items()
    newer = [str(updates / update_file_name(s, stream)) for s in sequences if s >= info["sequence"]]
    assert len(newer) >= 4  # steps 3..6 were published after the exported checkpoint
    (tmp_path / "messages.json").write_text(json.dumps(newer))
    # A message deleting every C1 key of the requests (and one no table holds), after the published ones.
    ids = read_parameter_ids(str(tmp_path / "m"))
    table_id, width = ids.tables["C1"]
    c1 = np.unique(trainer.parser.parse(lines).features["C1"].numpy())
    gone = np.append(c1, np.int64(-12345))
    snapshot = UpdateSnapshot(trainer.step + 1, time.time(), {}, deletes={table_id: gone})
    delete = encode_update(snapshot, info["model_name"], sequences[-1] + 1, 10**6, 1 << 20, {table_id: width},
                           stream)[0]
    (tmp_path / "delete.pb").write_bytes(UpdateSigner(SECRET).sign([delete])[0])  # as the trainer would sign it
    readers = [preloaded_python.Popen([PYTHON, "-c", READER, version, str(tmp_path / "requests.json"),
                                 str(tmp_path / "messages.json"), str(tmp_path / "delete.pb")],
                                env=python_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preload="serving")
               for version in (stock, normal)]
    # What the trainer predicted at the exported checkpoint (the fresh processes run meanwhile)
    restored = restore_model(trainer.config, str(tmp_path / "m" / "model.ckpt-2"))
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    logits, = restored.model(trainer.parser.parse(lines).features, training=False).values()
    at_export = tf.sigmoid(logits).numpy()
    results = []
    for proc in readers:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    got, want = results
    assert got["stock"] and not want["stock"]
    assert got["tfra_modules"] == [] and want["tfra_modules"]  # TFRA never loaded for the stock export
    assert got["unknown_ops"] == [] and not [op for op in got["ops"] if "TFRA" in op]
    assert "MutableHashTableOfTensorsV2" in got["ops"] and "LookupTableRemoveV2" in got["ops"]
    assert "StringToHashBucketStrong" in got["ops"]  # the MAC check is in the graph, in core ops
    assert got["outputs"] == want["outputs"] == ["logits", "probs"]
    np.testing.assert_allclose(got["before"], at_export, atol=1e-5)
    np.testing.assert_allclose(got["session_before"], got["before"], atol=1e-6)
    np.testing.assert_allclose(got["session_after"], got["after"], atol=1e-6)
    for stage in ("before", "after", "rest", "deleted"):
        np.testing.assert_allclose(got[stage], want[stage], atol=1e-6, err_msg=stage)
    assert got["last_sequence"] == want["last_sequence"] >= info["sequence"]
    np.testing.assert_allclose(got["after"], trainer_probs(trainer, lines), atol=1e-5)
    assert not np.allclose(got["after"], got["before"], atol=1e-4)  # the updates changed what it predicts
    assert not np.allclose(got["deleted"], got["after"], atol=1e-6)  # deleted rows now read as zeros
    assert got["keys"] == want["keys"]
    held = set(got["keys"][str(table_id)])
    assert held and not held & set(c1.tolist())
    trained = {t: set(trainer.model.tables.embeddings[name].params.export()[0].numpy().tolist())
               for name, (t, _) in ids.tables.items()}
    assert held == trained[table_id] - set(c1.tolist())
    assert all(set(got["keys"][str(t)]) == keys for t, keys in trained.items() if t != table_id)


def test_serve_answers_and_follows_updates_on_a_stock_export_without_tfra(exported):
    trainer, tmp_path, _, stock = exported
    lines = list(SyntheticCtrStream().lines(0, 5))
    server = Server(os.path.dirname(stock), tmp_path / "serve.log")
    try:
        last = max(next(iter(list_update_files(str(tmp_path / "updates")).values())))
        server.wait_for(lambda s: s["last_applied_sequence"] == last and s["refused_updates"] == {})
        np.testing.assert_allclose(server.predict(instances(lines)), trainer_probs(trainer, lines), atol=1e-5)
        with open(f"/proc/{server.proc.pid}/maps") as f:
            assert "tensorflow_recommenders_addons" not in f.read()  # none of TFRA's libraries is loaded
    finally:
        server.stop()
