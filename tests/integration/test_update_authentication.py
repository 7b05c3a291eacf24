"""Only the trainer writes to a served model (issue 51, finding 1).

Real: the trainer (trained in-process from a file, publishing signed messages to a directory transport),
``python -m easyonline.export`` (the default signed export, the stock-serving kind, a prediction-only one),
``python -m easyonline.serve`` as a child process answering REST and TF Serving's gRPC API (with
``--follow_updates=false``, as a stock TF Serving fed over gRPC), TLS with certificates made by openssl per run,
and the stock export's signed update signatures run by TensorFlow as TF Serving runs them.

Proved: a server refuses, counts (``easyonline_serving_refused_updates_total``) and does not apply an update
over gRPC that is unsigned, signed with another secret, carries a NaN (though signed), or declares more values
than it holds; its predictions do not change; the trainer's own signed messages then apply and the server
equals the trainer. A server of an unsigned trainer refuses updates over gRPC unless told otherwise. The
stock export's graph itself refuses unsigned messages; a prediction-only export has no update signature.
REST and gRPC over TLS serve a client holding a certificate of the client CA and refuse one without.
"""
import json
import os
import re
import shutil
import ssl
import urllib.request

import numpy as np
import pytest

from easyonline.protos import update_pb2
from easyonline.tools.stream_producer import SyntheticCtrStream
from easyonline.tools.tls_certs import make_server_certificate
from easyonline.updates.signing import UpdateSigner, UpdateVerifier
from easyonline.jobs.online_train import build_trainer
from easyonline.utils import preloaded_python
from tests.conftest import PYTHON, online_config, python_env
from tests.integration.test_export_serve import Server, _file_numbers, instances, trainer_probs
from tests.integration.test_stock_serving_export import export_in_one_process

SECRET_VAR = "EASYONLINE_TEST_UPDATE_SECRET"
SECRET = "the trainer's own secret"


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    """A model trained with a signing secret (a ${NAME} in its config), its messages, and three exports."""
    tmp_path = tmp_path_factory.mktemp("signed")
    old = os.environ.get(SECRET_VAR)
    os.environ[SECRET_VAR] = SECRET
    data = tmp_path / "train.csv"
    data.write_bytes(b"\n".join(SyntheticCtrStream().lines(0, 2000)) + b"\n")
    updates = tmp_path / "updates"
    config = online_config(tmp_path / "m", **{
        "data_config.batch_size": 500, "train_config.save_checkpoints_secs": 0,
        "train_config.save_checkpoints_steps": 1,
        "train_config.incr_save_config": {"sparse_save_steps": 1, "dense_save_steps": 1,
                                          "signing_secret": "${" + SECRET_VAR + "}",
                                          "fs": {"incr_save_dir": str(updates)}}})
    config.ClearField("kafka_train_input")
    config.file_train_input.paths.append(str(data))
    trainer = build_trainer(config, online=False)
    trainer.run()
    saved = (tmp_path / "m" / "pipeline.config").read_text()
    assert SECRET not in saved and "${" + SECRET_VAR + "}" in saved  # the reference is saved, never the secret
    numbers = sorted(_file_numbers(updates), key=lambda n: n[1])
    names = {int(n[28:40]): n for n in os.listdir(updates) if n.endswith(".pb")}
    messages = [(updates / names[sequence]).read_bytes() for _, sequence in numbers]
    # the normal export from step 1's checkpoint: the messages after it are still to apply
    # (the three exports in one process: one TensorFlow import, not three)
    exports = dict(zip(("normal", "stock", "prediction_only"), export_in_one_process(
        tmp_path / "m", (tmp_path / "export", {"checkpoint_path": f"{tmp_path}/m/model.ckpt-1"}),
        (tmp_path / "stock", {"for_stock_serving": True}), (tmp_path / "plain", {"update_signatures": "none"}))))
    yield trainer, messages, exports, tmp_path
    if old is None:
        os.environ.pop(SECRET_VAR, None)
    else:
        os.environ[SECRET_VAR] = old


def _grpc_port(server):
    return int(re.search(r"over gRPC on [\d.]+:(\d+)", server.log_tail(100000))[1])


def _stub(server, credentials=None):
    import grpc  # pylint: disable=g-import-not-at-top
    from tensorflow_serving.apis import prediction_service_pb2_grpc  # pylint: disable=g-import-not-at-top
    target = f"127.0.0.1:{_grpc_port(server)}"
    channel = grpc.secure_channel(target, credentials) if credentials else grpc.insecure_channel(target)
    return prediction_service_pb2_grpc.PredictionServiceStub(channel)


def _update_request(server, messages):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from tensorflow_serving.apis import predict_pb2  # pylint: disable=g-import-not-at-top
    request = predict_pb2.PredictRequest()
    request.model_spec.name = server.model_name
    request.model_spec.signature_name = "incr_update_message_sig"
    request.inputs["messages"].CopyFrom(tf.make_tensor_proto(messages, dtype=tf.string))
    return request


def _refused(server):
    with urllib.request.urlopen(server.url("/metrics"), timeout=10) as r:
        text = r.read().decode()
    return {m[1]: int(m[2]) for m in re.finditer(r'easyonline_serving_refused_updates_total\{reason="(\w+)"\} (\d+)',
                                                  text)}


def _with_nan(data: bytes) -> bytes:
    """The message (its body: the MAC stripped) with its first dense entry's first value NaN, signed with the
    right secret: what a trainer whose parameters diverged would publish."""
    message = update_pb2.UpdateMessage.FromString(UpdateVerifier(SECRET).verify(data))
    entry = message.dense[0]
    entry.values = np.full(len(entry.values) // 4, np.nan, "<f4").tobytes()
    message.ClearField("mac")
    return UpdateSigner(SECRET).sign([message.SerializeToString(deterministic=True)])[0]


def test_messages_are_signed_and_the_secret_is_never_written(signed):
    _, messages, exports, _ = signed
    assert len(messages) >= 4
    verifier = UpdateVerifier(SECRET)
    for data in messages:
        update_pb2.UpdateMessage.FromString(verifier.verify(data))  # each one verifies and decodes
    for version in exports.values():
        assets = os.path.join(version, "assets")
        assert SECRET not in open(os.path.join(assets, "pipeline.config")).read()
    info = {kind: json.load(open(os.path.join(v, "assets", "incr_update.txt")))["update_signatures"]
            for kind, v in exports.items()}
    assert info == {"normal": "signed", "stock": "signed", "prediction_only": "none"}


def test_grpc_updates_unsigned_forged_nan_or_oversized_are_refused_and_change_nothing(signed, tmp_path):
    import grpc  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    trainer, messages, exports, _ = signed
    export_dir = tmp_path / "export"
    shutil.copytree(exports["normal"], export_dir / os.path.basename(exports["normal"]))
    server = Server(export_dir, tmp_path / "serve.log", "--follow_updates=false", "--grpc_port=0")
    try:
        stub = _stub(server)
        rows = instances(SyntheticCtrStream().lines(3000, 20))
        before = server.predict(rows)
        start = json.load(open(os.path.join(exports["normal"], "assets", "incr_update.txt")))["sequence"]
        pending = messages[start - 1:]  # the messages after the export's checkpoint (sequence `start` on)
        assert len(pending) >= 2
        first = UpdateVerifier(SECRET).verify(pending[0])
        forged = UpdateSigner("a guessed secret").sign([first])[0]
        bomb = tf.make_tensor_proto([pending[0]], dtype=tf.string)
        bomb.tensor_shape.dim[0].size = 40000  # declares 40,000 messages, holds one (TF would repeat it)
        attempts = [  # (messages or a tensor, status, words in the error, reason counted)
            ([first], grpc.StatusCode.PERMISSION_DENIED, "carries no signature", "unsigned"),
            ([forged], grpc.StatusCode.PERMISSION_DENIED, "not made with this server's secret", "signature"),
            ([_with_nan(pending[0])], grpc.StatusCode.INVALID_ARGUMENT, "NaN or infinite", "inconsistent"),
            (bomb, grpc.StatusCode.INVALID_ARGUMENT, "declares 40,000 values but it holds 1", "too_large"),
        ]
        for payload, status, words, reason in attempts:
            request = _update_request(server, [b""])
            request.inputs["messages"].CopyFrom(payload if not isinstance(payload, list)
                                                else tf.make_tensor_proto(payload, dtype=tf.string))
            with pytest.raises(grpc.RpcError) as e:
                stub.Predict(request, timeout=60)
            assert e.value.code() == status and words in e.value.details(), (reason, e.value.details())
            assert _refused(server)[reason] == 1, _refused(server)
            np.testing.assert_array_equal(server.predict(rows), before)  # nothing was applied
        assert server.status()["model_version_status"][0]["state"] == "AVAILABLE"
        # the trainer's own messages, in order, apply: the server then equals the trainer
        for at in range(0, len(messages), 3):  # from the first (those before `start` are dropped as duplicates)
            stub.Predict(_update_request(server, messages[at:at + 3]), timeout=60)
        np.testing.assert_allclose(server.predict(rows), trainer_probs(trainer, SyntheticCtrStream().lines(3000, 20)),
                                   atol=1e-5)
        assert not np.allclose(server.predict(rows), before)
    finally:
        assert server.stop() == 0
    assert "refused an update message (signature): over gRPC" in server.log_tail(200000)


def test_a_server_without_the_secret_refuses_to_start_or_refuses_grpc_updates(signed, tmp_path):
    _, messages, exports, _ = signed
    env = {k: v for k, v in python_env().items() if k != SECRET_VAR}
    run = preloaded_python.run([PYTHON, "-m", "easyonline.serve", f"--export_dir={exports['normal']}", "--port=0"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and f"set the environment variable {SECRET_VAR}" in run.stderr, run.stderr[-2000:]

    # An export whose config names no secret (as a trainer that signs nothing): the server has nothing to verify
    # with, so it refuses updates over gRPC, even these (signed) ones, unless started with --allow_unsigned_updates
    # (then the export's signed graph still checks their MACs itself).
    import grpc  # pylint: disable=g-import-not-at-top
    version = tmp_path / "export" / os.path.basename(exports["normal"])
    shutil.copytree(exports["normal"], version)
    config = version / "assets" / "pipeline.config"
    config.write_text(re.sub(r"\s*signing_secret: \"[^\"]*\"", "", config.read_text()))
    bodies = messages[:2]
    server = ServingProcessWithout(tmp_path / "export", tmp_path / "a.log", env)
    try:
        with pytest.raises(grpc.RpcError) as e:
            _stub(server).Predict(_update_request(server, bodies), timeout=60)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED and "--allow_unsigned_updates" in e.value.details()
        assert _refused(server)["unsigned"] == 1
    finally:
        server.stop()
    server = ServingProcessWithout(tmp_path / "export", tmp_path / "b.log", env, "--allow_unsigned_updates")
    try:
        answer = _stub(server).Predict(_update_request(server, bodies), timeout=60)
        assert answer.outputs["applied"].int64_val[0] > 0
    finally:
        server.stop()


def ServingProcessWithout(export_dir, log_path, env, *flags):  # pylint: disable=invalid-name
    from easyonline.serve.process import ServingProcess  # pylint: disable=g-import-not-at-top
    return ServingProcess(str(export_dir), str(log_path), "--follow_updates=false", "--grpc_port=0", *flags,
                          model_name="m", env=env)


def test_the_stock_export_graph_refuses_unsigned_updates_and_prediction_only_has_none(signed):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    trainer, messages, exports, _ = signed
    stock = tf.saved_model.load(exports["stock"])
    assert set(stock.signatures) == {"serving_default", "incr_update_sig", "incr_update_message_sig"}
    apply = stock.signatures["incr_update_message_sig"]
    before = {k: v.numpy() for k, v in stock.table_keys().items()}
    first = UpdateVerifier(SECRET).verify(messages[0])
    for bad in ([first], [UpdateSigner("another secret").sign([first])[0]], [messages[0], first]):
        with pytest.raises(tf.errors.InvalidArgumentError, match="is unsigned or not signed with this model"):
            apply(messages=tf.constant(bad))
    after = {k: v.numpy() for k, v in stock.table_keys().items()}
    assert all(np.array_equal(np.sort(before[k]), np.sort(after[k])) for k in before)  # nothing applied
    out = apply(messages=tf.constant(messages))
    assert int(out["last_sequence"]) == len(messages)
    update = stock.signatures["incr_update_sig"]
    assert "mac" in update.structured_input_signature[1]
    plain = tf.saved_model.load(exports["prediction_only"])
    assert set(plain.signatures) == {"serving_default"}
    del trainer


def test_rest_and_grpc_over_tls_with_client_certificates(signed, tmp_path):
    import grpc  # pylint: disable=g-import-not-at-top
    _, _, exports, _ = signed
    server_cert = make_server_certificate(str(tmp_path / "pki"), "server")
    client = make_server_certificate(str(tmp_path / "pki"), "client")  # signed by the same CA
    from easyonline.serve.process import ServingProcess  # pylint: disable=g-import-not-at-top
    trusted = ssl.create_default_context(cafile=server_cert.ca_cert)
    trusted.load_cert_chain(client.cert, client.key)
    server = ServingProcess(os.path.dirname(exports["prediction_only"]), str(tmp_path / "tls.log"), "--grpc_port=0",
                            f"--tls_cert_file={server_cert.cert}", f"--tls_key_file={server_cert.key}",
                            f"--tls_client_ca_file={server_cert.ca_cert}", model_name="m", env=python_env(),
                            ssl_context=trusted)
    try:
        url = f"https://127.0.0.1:{server.port}/v1/models/m"
        assert server.status()["model_version_status"][0]["state"] == "AVAILABLE"  # with the client certificate
        without = ssl.create_default_context(cafile=server_cert.ca_cert)
        with pytest.raises(OSError):  # no client certificate: the handshake is refused
            with urllib.request.urlopen(url, timeout=10, context=without) as r:
                r.read()
        with pytest.raises(OSError):  # plain HTTP to the TLS port
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/v1/models/m", timeout=10)
        from tensorflow_serving.apis import get_model_metadata_pb2  # pylint: disable=g-import-not-at-top
        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        request.model_spec.name = "m"
        ca = open(server_cert.ca_cert, "rb").read()
        with_cert = grpc.ssl_channel_credentials(ca, open(client.key, "rb").read(), open(client.cert, "rb").read())
        assert _stub(server, with_cert).GetModelMetadata(request, timeout=30).model_spec.name == "m"
        with pytest.raises(grpc.RpcError) as e:
            _stub(server, grpc.ssl_channel_credentials(ca)).GetModelMetadata(request, timeout=30)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        assert server.stop() == 0
