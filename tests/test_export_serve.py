"""Export and the serving processor, end to end: real broker, real TF/TFRA, real HTTP on 127.0.0.1.

Export and serving run as subprocesses, as users run them (TFRA's inference
mode, which export switches on, is process-global).
"""
import json
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from easyonline.publish.param_ids import read_parameter_ids
from easyonline.publish.publish_callback import IncrementalPublish
from easyonline.publish.update_codec import UpdateSnapshot, encode_update
from easyonline.publish.update_stream import update_file_name
from easyonline.tools.stream_producer import SyntheticCtrStream, produce
from easyonline.train.callbacks import Callback
from easyonline.train.trainer import OnlineTrainer
from easyonline.utils.net import free_port
from tests.conftest import PYTHON, online_config, python_env

FIELDS = ["label"] + [f"I{i}" for i in range(1, 14)] + [f"C{i}" for i in range(1, 27)]


def instances(lines):
    """TF Serving "instances" rows from CSV sample lines (numbers as numbers, ids as strings)."""
    rows = []
    for line in lines:
        values = line.decode().split(",")
        rows.append({n: (float(v) if n.startswith("I") else v) for n, v in zip(FIELDS, values) if n != "label"})
    return rows


def trainer_probs(trainer, lines):
    parsed = trainer.parser.parse(lines)
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf.sigmoid(trainer.model(parsed.features, training=False)).numpy()


def export(model_dir, export_dir):
    proc = subprocess.run([PYTHON, "-m", "easyonline.export", f"--config={model_dir}/pipeline.config",
                           f"--export_dir={export_dir}"], env=python_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


class Server:
    def __init__(self, export_dir, log_path, *flags):
        self.port = free_port()
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen([PYTHON, "-m", "easyonline.serve", f"--export_dir={export_dir}",
                                      f"--port={self.port}", "--status_secs=1", *flags],
                                     env=python_env(), stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            assert self.proc.poll() is None, open(log_path).read()[-3000:]
            try:
                self.status()
                return
            except OSError:
                time.sleep(0.3)
        raise AssertionError("the server did not answer within 120 s")

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def status(self, name="m"):
        with urllib.request.urlopen(self.url(f"/v1/models/{name}"), timeout=10) as r:
            return json.loads(r.read())

    def post(self, body: bytes, name="m"):
        request = urllib.request.Request(self.url(f"/v1/models/{name}:predict"), data=body, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def predict(self, rows):
        code, body = self.post(json.dumps({"instances": rows}).encode())
        assert code == 200, body
        return np.array([p["probs"] for p in body["predictions"]])

    def wait_for(self, condition, timeout=90):
        deadline = time.time() + timeout
        while time.time() < deadline:
            status = self.status()
            if condition(status):
                return status
            time.sleep(0.3)
        raise AssertionError(f"condition not met; last status {status}")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(30) == 0
        self.log.close()


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
    produce(broker.bootstrap, topic, stream.chunks(0, 3000), partitions=2)
    model_dir = tmp_path / "m"
    config = online_config(model_dir, broker.bootstrap, topic, **{
        "data_config.batch_size": 250, "data_config.batch_timeout_ms": 200, "train_config.save_checkpoints_steps": 4,
        "train_config.save_checkpoints_secs": 0, "train_config.log_step_count_secs": 2,
        "train_config.incr_save_config": {"sparse_save_secs": 1, "dense_save_secs": 1,
                                          "kafka": {"server": broker.bootstrap, "topic": topic + "_updates"}}})
    count = Count()
    trainer = OnlineTrainer(config, online=True, callbacks=[count])
    thread = threading.Thread(target=trainer.run, daemon=True)
    thread.start()
    lines = list(stream.lines(50000, 20))  # samples never trained on; many of their ids are known
    requests = instances(lines)
    server = None
    try:
        assert _wait(lambda: count.samples >= 3000 and trainer.last_checkpoint, 120)
        export_dir = tmp_path / "export"
        version = export(model_dir, export_dir)
        assets = os.path.join(version, "assets")
        assert sorted(os.listdir(assets)) == ["DENSE_UPDATE_VARIABLES", "embed_name_to_ids.txt",
                                              "incr_update.txt", "pipeline.config"]
        info = json.load(open(os.path.join(assets, "incr_update.txt")))
        assert info["storage"] == "kafka" and info["topic"] == topic + "_updates"
        cli = subprocess.run([os.path.join(os.path.dirname(PYTHON), "saved_model_cli"), "show", "--all",
                              "--dir", version], capture_output=True, text=True, timeout=120)
        assert "signature_def['serving_default']" in cli.stdout and "signature_def['incr_update_sig']" in cli.stdout

        server = Server(export_dir, tmp_path / "serve.log")
        before = server.predict(requests)
        produce(broker.bootstrap, topic, stream.chunks(3000, 3000), partitions=2)
        assert _wait(lambda: count.samples >= 6000, 120)
        # Served predictions change while the trainer keeps training (no reload, updates only).
        deadline = time.time() + 60
        while np.allclose(server.predict(requests), before, atol=1e-6) and time.time() < deadline:
            time.sleep(0.5)
        assert not np.allclose(server.predict(requests), before, atol=1e-6)
    finally:
        trainer.stop("test done")
        thread.join(120)
    try:
        publish = next(c for c in trainer.callbacks if isinstance(c, IncrementalPublish))
        last = publish.publisher.last_acked.last_sequence
        status = server.wait_for(lambda s: s["last_applied_sequence"] == last and s["update_lag_messages"] == 0)
        assert status["last_applied_step"] == trainer.step and status["refused_updates"] == {}
        expected = trainer_probs(trainer, lines)
        np.testing.assert_allclose(server.predict(requests), expected, atol=1e-5)
        metrics = urllib.request.urlopen(server.url("/metrics"), timeout=10).read().decode()
        assert f"easyonline_serving_last_applied_sequence {last}" in metrics
        # A restart loads the same export, replays the stream from its recorded position: same state.
        server.stop()
        server = Server(export_dir, tmp_path / "serve2.log")
        server.wait_for(lambda s: s["last_applied_sequence"] == last)
        np.testing.assert_allclose(server.predict(requests), expected, atol=1e-5)
    finally:
        if server is not None and server.proc.poll() is None:
            server.stop()


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
    trainer = OnlineTrainer(config, online=False)
    trainer.run()
    export(tmp_path / "m", tmp_path / "export")
    server = Server(tmp_path / "export", tmp_path / "serve.log", "--max_request_bytes=20000")
    yield trainer, server, updates, read_parameter_ids(str(tmp_path / "m"))
    server.stop()


def test_file_updates_duplicates_gaps_and_garbage_are_handled(served_from_files):
    trainer, server, updates, ids = served_from_files
    requests = list(SyntheticCtrStream().lines(0, 5))
    expected = trainer_probs(trainer, requests)
    np.testing.assert_allclose(server.predict(instances(requests)), expected, atol=1e-5)
    status = server.status()
    last = status["last_applied_sequence"]
    assert last == max(int(n[7:19]) for n in os.listdir(updates) if n.endswith(".pb"))

    def write(sequence_in_name, data):
        path = updates / update_file_name(sequence_in_name)
        path.write_bytes(data)
        (updates / (update_file_name(sequence_in_name) + ".done")).write_bytes(b"")

    table_name = "C1" if "C1" in ids.tables else sorted(ids.tables)[0]
    table_id, width = ids.tables[table_name]
    key = int(trainer.parser.parse(requests).features[table_name].numpy()[0])

    def message(sequence):
        snapshot = UpdateSnapshot(trainer.step + 1, time.time(), {},
                                  rows={table_id: (np.array([key], np.int64), np.full((1, width), 0.5, np.float32))})
        return encode_update(snapshot, status["model_name"], sequence, 999, 1 << 20, {table_id: width})[0]

    duplicate = (updates / update_file_name(last)).read_bytes()
    write(last + 1, duplicate)                      # an old sequence again: skipped
    write(last + 2, b"\x08\x96garbage\xff")          # not an UpdateMessage: refused
    write(last + 3, message(last + 1)[:-7])         # truncated: refused
    write(last + 4, message(last + 5))              # out of order (a gap): refused
    status = server.wait_for(lambda s: s["skipped_updates"] >= 1 and sum(s["refused_updates"].values()) >= 3)
    assert status["refused_updates"] == {"malformed": 2, "gap": 1}, status
    assert status["last_applied_sequence"] == last
    np.testing.assert_allclose(server.predict(instances(requests)), expected, atol=1e-5)  # nothing applied
    write(last + 5, message(last + 1))              # the expected next one: applied
    server.wait_for(lambda s: s["last_applied_sequence"] == last + 1)
    changed = server.predict(instances(requests))
    assert abs(changed[0] - expected[0]) > 1e-4  # the row of its C1 id was replaced


def test_bad_and_oversized_predict_requests_get_clear_errors(served_from_files):
    _, server, _, _ = served_from_files
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
