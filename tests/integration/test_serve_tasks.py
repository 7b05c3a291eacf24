"""Every task's outputs through export, REST, gRPC and the predict job, under EasyRec's names.

A regression model (``loss_type: L2_LOSS``) answers ``y`` (no ``probs``); the
server starts from an export of an early checkpoint and replays the updates
the trainer published after it, so its answers equal the trained model's.
Uses test_export_serve's helpers (export, Server, instances): subprocesses,
real TF/TFRA, real HTTP and gRPC on 127.0.0.1.
"""
import json
import re

import numpy as np
import pytest

from easyonline.checkpoint.checkpointer import latest_checkpoint
from easyonline.config import apply_edit_config_json
from easyonline.jobs.online_train import build_trainer
from easyonline.predict.sinks import prediction_lines
from easyonline.scoring.checkpoint_model import CheckpointModel
from easyonline.tools.stream_producer import SyntheticCtrStream
from easyonline.utils import preloaded_python
from tests.conftest import PYTHON, online_config, python_env
from tests.integration import test_multi_task_models as multi_task
from tests.integration.test_export_serve import Server, _file_numbers, instances
from tests.integration.test_stock_serving_export import export_in_one_process


def trained_outputs(trainer, lines):
    """The trained model's ``task_outputs`` (every output name -> numpy [B]) for CSV sample lines."""
    model = trainer.model
    parsed = trainer.parser.parse(lines)
    return {name: value.numpy() for name, value in
            model.task_outputs(model(parsed.features, training=False)).items()}


def grpc_outputs(server, rows):
    """Every output tensor a TF Serving gRPC client gets for ``rows``, by name."""
    import grpc  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc  # pylint: disable=g-import-not-at-top
    port = int(re.search(r"over gRPC on [\d.]+:(\d+)", server.log_tail(100000))[1])
    stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
    request = predict_pb2.PredictRequest()
    request.model_spec.name = server.model_name
    for name in rows[0]:
        request.inputs[name].CopyFrom(tf.make_tensor_proto([row[name] for row in rows],
                                                           dtype=tf.float32 if name.startswith("I") else tf.string))
    response = stub.Predict(request, timeout=30)
    return {name: tf.make_ndarray(proto) for name, proto in response.outputs.items()}


def train_and_publish(tmp_path, config, lines):
    """``config`` trained on ``lines`` (six steps: batch size len(lines) / 6) from a file, publishing every 2
    steps to a directory; a server of an export of its step-2 checkpoint must replay steps 3-6 from the
    updates. Returns (trainer, the update directory)."""
    data = tmp_path / "train.csv"
    data.write_bytes(b"\n".join(lines) + b"\n")
    updates = tmp_path / "updates"
    config.model_dir = str(tmp_path / "m")
    apply_edit_config_json(config, {
        "data_config.batch_size": len(lines) // 6, "train_config.save_checkpoints_secs": 0,
        "train_config.save_checkpoints_steps": 2,
        "train_config.incr_save_config": {"sparse_save_steps": 2, "dense_save_steps": 2,
                                          "fs": {"incr_save_dir": str(updates)}}})
    config.ClearField("kafka_train_input")
    config.file_train_input.paths.append(str(data))
    trainer = build_trainer(config, online=False)
    trainer.run()
    assert trainer.step == 6
    return trainer, updates


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """{"regression": ..., "mmoe": ...}: (trainer, the export's version directory, the update directory, the
    model's tmp dir) of each model (MMOE below), trained by train_and_publish, with the exports of their step-2
    checkpoints into <tmp dir>/export made by one process (one TensorFlow import, not one per model)."""
    models = {}
    for name in ("regression", "mmoe"):
        tmp_path = tmp_path_factory.mktemp(name)
        if name == "regression":
            config = online_config(tmp_path / "m", **{"model_config.loss_type": "L2_LOSS"})
            lines = SyntheticCtrStream().lines(0, 3000)
        else:
            config = multi_task.config_for(MMOE, tmp_path / "m")
            lines = multi_task.lines(0, 1200)
        models[name] = (*train_and_publish(tmp_path, config, lines), tmp_path)
    versions = export_in_one_process(None, *[
        (tmp_path / "export", {"checkpoint_path": str(tmp_path / "m" / "model.ckpt-2")}, tmp_path / "m")
        for _, _, tmp_path in models.values()])
    return {name: (trainer, version, updates, tmp_path)
            for (name, (trainer, updates, tmp_path)), version in zip(models.items(), versions)}


def replayed(server, updates):
    """Waits until the server applied every update in ``updates`` (the trainer's steps 3-6)."""
    last = max(sequence for _, sequence in _file_numbers(updates))
    status = server.wait_for(lambda s: s["last_applied_sequence"] == last, timeout=120)
    assert status["last_applied_step"] == 6 and status["refused_updates"] == {}


@pytest.fixture(scope="module")
def regression_served(trained):
    trainer, version, updates, tmp_path = trained["regression"]
    server = Server(tmp_path / "export", tmp_path / "serve.log", "--grpc_port=0")
    yield trainer, server, version, updates, tmp_path
    server.stop()


def test_a_regression_export_serves_y_over_rest_and_grpc_equal_to_the_trained_model(regression_served):
    trainer, server, _, updates, _ = regression_served
    replayed(server, updates)
    lines = list(SyntheticCtrStream().lines(50000, 7))  # never trained on; many of their ids are known
    expected = trained_outputs(trainer, lines)
    assert sorted(expected) == ["y"]  # one regression task: EasyRec's name, no sigmoid, no logits
    rows = instances(lines)
    served = server.predict_outputs(rows)
    assert sorted(served) == ["y"]
    np.testing.assert_allclose(served["y"], expected["y"], atol=1e-5)
    np.testing.assert_allclose(server.predict(rows), expected["y"], atol=1e-5)  # the single task's output
    code, body = server.post(json.dumps({"inputs": {name: [rows[0][name]] for name in rows[0]}}).encode())
    assert code == 200 and sorted(body["outputs"]) == ["y"]
    np.testing.assert_allclose(body["outputs"]["y"], expected["y"][:1], atol=1e-5)
    by_grpc = grpc_outputs(server, rows)
    assert sorted(by_grpc) == ["y"]
    np.testing.assert_allclose(by_grpc["y"], expected["y"], atol=1e-5)
    with pytest.raises(KeyError, match="y"):
        server.predict(rows, output="probs")  # a regression has no probs: named, not a silent 0


def test_predict_writes_the_regression_column_named(regression_served):
    trainer, _, version, _, tmp_path = regression_served
    lines = list(SyntheticCtrStream().lines(60000, 5))
    (tmp_path / "score.csv").write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "scores.tsv"
    proc = preloaded_python.run([PYTHON, "-m", "easyonline.predict", f"--config={tmp_path / 'm' / 'pipeline.config'}",
                           f"--input_path={tmp_path / 'score.csv'}", f"--output_path={out}", "--output_header"],
                          env=python_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "(columns: y, sample)" in proc.stdout, proc.stdout
    header, *scored = out.read_bytes().splitlines()
    assert header == b"y\tsample" and len(scored) == 5
    assert [line.split(b"\t", 1)[1] for line in scored] == lines
    np.testing.assert_allclose([float(line.split(b"\t")[0]) for line in scored],
                               trained_outputs(trainer, lines)["y"], atol=2e-6)  # six decimals
    # the export of step 2 writes the same column, with that checkpoint's values
    proc = preloaded_python.run([PYTHON, "-m", "easyonline.predict", f"--export_dir={version}",
                           f"--input_path={tmp_path / 'score.csv'}", f"--output_path={tmp_path / 'early.tsv'}"],
                          env=python_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    early = [line.split(b"\t") for line in (tmp_path / "early.tsv").read_bytes().splitlines()]
    assert len(early) == 5 and all(len(parts) == 2 for parts in early)  # y, then the sample
    assert not np.allclose([float(p[0]) for p in early], [float(line.split(b"\t")[0]) for line in scored], atol=1e-4)


# MMoE of test_multi_task_models with a third, regression tower (on clk): binary and regression outputs at once;
# with deepfm_terms (a first-order column in every id row, the terms' scales a dense variable), which the
# export, the updates and the checkpoint carry as any other parameter (EasyRec's own MMoE is served in
# test_easyrec_multitask)
MMOE = multi_task.MMOE.replace('    l2_regularization', '    task_towers { tower_name: "score" label_name: "clk" '
                               'loss_type: L2_LOSS dnn { hidden_units: [4] } }\n    deepfm_terms: true\n'
                               '    l2_regularization')


def mmoe_instances(lines):
    """REST rows of test_multi_task_models' samples (clk,buy,I1..I3,C1..C6): numbers as numbers, ids as strings."""
    names = ["clk", "buy", *multi_task.RAW_FEATURES, *multi_task.ID_FEATURES]
    return [{n: (float(v) if n.startswith("I") else v) for n, v in zip(names, line.decode().split(","))
             if n not in ("clk", "buy")} for line in lines]


def test_an_mmoe_export_serves_every_towers_outputs_over_rest_and_grpc_equal_to_the_trained_model(trained):
    trainer, _, updates, tmp_path = trained["mmoe"]
    config = trainer.config
    assert trainer.model.wide_dim == 1 and trainer.model.deepfm_scales is not None
    lines = multi_task.lines(50000, 6)  # never trained on
    expected = trained_outputs(trainer, lines)
    names = ["logits_ctr", "logits_cvr", "probs_ctr", "probs_cvr", "y_score"]  # EasyRec's names, per tower
    assert sorted(expected) == names
    server = Server(tmp_path / "export", tmp_path / "serve.log", "--grpc_port=0")
    try:
        replayed(server, updates)  # the live model: steps 3-6 of every tower came as updates
        rows = mmoe_instances(lines)
        for served in (server.predict_outputs(rows), grpc_outputs(server, rows)):
            assert sorted(served) == names
            for name in names:
                np.testing.assert_allclose(served[name], expected[name], atol=1e-5, err_msg=name)
        code, body = server.post(json.dumps({"inputs": {n: [rows[0][n]] for n in rows[0]}}).encode())
        assert code == 200 and sorted(body["outputs"]) == names
        np.testing.assert_allclose(body["outputs"]["y_score"], expected["y_score"][:1], atol=1e-5)
        with pytest.raises(KeyError, match="probs_ctr"):
            server.predict(rows)  # no single "probs": the output must be named
        np.testing.assert_allclose(server.predict(rows, output="probs_cvr"), expected["probs_cvr"], atol=1e-5)
    finally:
        assert server.stop() == 0
    # the predict job's columns: each tower's prediction, in tower order (a checkpoint scores as the export)
    model = CheckpointModel(config)
    model.restore(latest_checkpoint(config.model_dir))
    columns = model.predictions(trainer.parser.parse(lines).features)
    assert list(columns) == ["probs_ctr", "probs_cvr", "y_score"]
    for name, values in columns.items():
        np.testing.assert_allclose(values, expected[name], atol=1e-5, err_msg=name)
    first = prediction_lines(list(columns.values()), lines)[0].split(b"\t")
    assert first[3] == lines[0] and [float(v) for v in first[:3]] == [round(float(columns[n][0]), 6) for n in columns]
