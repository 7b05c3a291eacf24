"""tools.tfserving_follower keeps a server answering TF Serving's gRPC API fresh, through the update signature.

The stock tensorflow_model_server cannot run here, so ``easyonline.serve --grpc_port --follow_updates=false``
stands in for it: it answers the same PredictionService (tensorflow-serving-api stubs) and, like TF Serving,
does not read the update stream itself; the follower, a process of its own, is the one writer. Both are
lost the production way, by SIGKILL at a moment the test does not choose within the stream: the server (a
new one reloads the export and the follower resends), then the follower (a new one resends from the export).
"""
import os
import re
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

from easyonline.publish.publish_callback import IncrementalPublish
from easyonline.tools.stream_producer import SyntheticCtrStream, produce
from easyonline.utils.net import free_port
from easyonline.jobs.online_train import build_trainer
from easyonline.utils import preloaded_python
from tests.conftest import PYTHON, online_config, python_env
from tests.integration.test_export_serve import Count, Server, _wait, export, instances, trainer_probs

# The export kind the server loads: () the normal one; ("--for_stock_serving",) the stock TF Serving kind.
EXPORT_FLAGS: tuple = ("--for_stock_serving",)  # the export stock TF Serving loads
# The trainer signs its updates, as in production: the export's update signatures check each MAC (the follower
# forwards the trainer's messages unchanged) and the server verifies them with the secret from its environment.
SECRET_VAR = "EASYONLINE_FOLLOWER_TEST_SECRET"
SIGNED = "${" + SECRET_VAR + "}"
os.environ.setdefault(SECRET_VAR, "the follower tests' update secret")  # exporters and servers inherit it


def _stub(port: int):
    import grpc  # pylint: disable=g-import-not-at-top
    from tensorflow_serving.apis import prediction_service_pb2_grpc  # pylint: disable=g-import-not-at-top
    return prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))


def _request(rows, signature="serving_default"):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from tensorflow_serving.apis import predict_pb2  # pylint: disable=g-import-not-at-top
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "m"
    request.model_spec.signature_name = signature
    for name in rows[0]:
        request.inputs[name].CopyFrom(tf.make_tensor_proto([row[name] for row in rows],
                                                           dtype=tf.float32 if name.startswith("I") else tf.string))
    return request


def _probs(stub, rows) -> np.ndarray:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf.make_ndarray(stub.Predict(_request(rows), timeout=30).outputs["probs"])


def _follower(export_dir, grpc_port, log_path, *flags):
    log = open(log_path, "ab")
    proc = preloaded_python.Popen([PYTHON, "-m", "easyonline.tools.tfserving_follower", f"--export_dir={export_dir}",
                             f"--target=127.0.0.1:{grpc_port}", "--model_name=m", "--status_secs=0.5", *flags],
                            env=python_env(), stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return proc


def _acked_sequence(log_path) -> int:
    """The last sequence the server acknowledged, from the follower's status lines (-1: none yet)."""
    found = re.findall(r" seq=(\d+) ", open(log_path, errors="replace").read())
    return int(found[-1]) if found else -1


def _stop(proc) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def test_the_follower_keeps_a_grpc_server_fresh_through_restarts(broker, topic, tmp_path):
    import grpc  # pylint: disable=g-import-not-at-top
    missing = preloaded_python.Popen([PYTHON, "-m", "easyonline.tools.tfserving_follower", f"--export_dir={tmp_path / 'none'}"],
                               env=python_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    unreachable = None
    broker.create_topic(topic, 1)
    stream = SyntheticCtrStream()
    produce(broker.bootstrap, topic, stream.chunks(0, 1500), partitions=1)
    model_dir = tmp_path / "m"
    config = online_config(model_dir, broker.bootstrap, topic, **{
        "data_config.batch_size": 250, "data_config.batch_timeout_ms": 200, "train_config.save_checkpoints_steps": 4,
        "train_config.save_checkpoints_secs": 0, "train_config.log_step_count_secs": 2,
        "train_config.incr_save_config": {"sparse_save_secs": 1, "dense_save_secs": 1, "signing_secret": SIGNED,
                                          "kafka": {"server": broker.bootstrap, "topic": topic + "_updates"}}})
    count = Count()
    trainer = build_trainer(config, online=True, callbacks=[count])
    thread = threading.Thread(target=trainer.run, daemon=True)
    thread.start()
    lines = list(stream.lines(50000, 20))  # never trained on; many of their ids are known
    rows = instances(lines)
    grpc_port = free_port()
    export_dir = tmp_path / "export"
    flags = (f"--grpc_port={grpc_port}", "--follow_updates=false")
    server = follower = None
    follower_log = tmp_path / "follower.log"
    try:
        assert _wait(lambda: count.samples >= 1500 and trainer.last_checkpoint, 120)
        export(model_dir, export_dir, *EXPORT_FLAGS)
        unreachable = preloaded_python.Popen([PYTHON, "-m", "easyonline.tools.tfserving_follower",
                                        f"--export_dir={export_dir}", f"--target=127.0.0.1:{free_port()}",
                                        "--connect_timeout_secs=1"], env=python_env(), stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
        server = Server(export_dir, tmp_path / "serve.log", *flags)
        stub = _stub(grpc_port)
        before = _probs(stub, rows)
        produce(broker.bootstrap, topic, stream.chunks(1500, 1000), partitions=1)
        assert _wait(lambda: count.samples >= 2500, 120)
        time.sleep(2)  # updates published meanwhile: the server does not read them itself
        np.testing.assert_array_equal(_probs(stub, rows), before)
        assert server.status()["applied_updates"] == 0

        # TF Serving's answers to a signature the model lacks, and to an update signature's bad input
        with pytest.raises(grpc.RpcError) as e:
            stub.Predict(_request(rows, "nope"), timeout=30)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and '"nope" not found' in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            stub.Predict(_request(rows, "incr_update_message_sig"), timeout=30)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "messages" in e.value.details()

        follower = _follower(export_dir, grpc_port, follower_log)
        # the served model follows training (no reload: the follower's updates only)
        assert _wait(lambda: not np.allclose(_probs(stub, rows), before, atol=1e-6), 60), follower_log.read_text()
        server.wait_for(lambda status: status["applied_updates"] > 0, 30)  # counted (just after it is applied)

        # the server is lost (SIGKILL, as a TF Serving pod at the worst moment) and restarts, reloading its
        # export, while the trainer keeps publishing: the follower retries, then resends from the export's
        # position
        assert server.kill() == -signal.SIGKILL
        produce(broker.bootstrap, topic, stream.chunks(2500, 1000), partitions=1)
        server = Server(export_dir, tmp_path / "serve2.log", *flags)
        assert _wait(lambda: "resending from the export's start" in follower_log.read_text(), 120), \
            follower_log.read_text()[-3000:]
        # then the follower itself is lost (SIGKILL) and a new one starts: it resends from the export's position
        # (updates carry values, not deltas: applying one twice changes nothing)
        follower.kill()
        follower.wait(30)
        follower = _follower(export_dir, grpc_port, follower_log)
        assert _wait(lambda: count.samples >= 3500, 120)
    except BaseException:
        for proc in (follower, missing, unreachable):
            if proc is not None:
                _stop(proc)
        if server is not None:
            server.stop()
        raise
    finally:
        trainer.stop("test done")
        thread.join(120)
    try:
        publish = next(c for c in trainer.callbacks if isinstance(c, IncrementalPublish))
        last = publish.publisher.last_acked.last_sequence
        expected = trainer_probs(trainer, lines)
        assert _wait(lambda: _acked_sequence(follower_log) == last, 90), follower_log.read_text()[-3000:]
        status = server.status()
        assert status["last_applied_sequence"] == last and status["last_applied_step"] == trainer.step
        np.testing.assert_allclose(_probs(stub, rows), expected, atol=1e-5)
        text = follower_log.read_text()
        assert re.search(r"unavailable|connection to .* broke", text) and "resending from the export's start" in text
        assert "behind=no" in [line for line in text.splitlines() if " seq=" in line][-1]  # nothing was lost
        assert _stop(follower) == 0 and "stopped: applied=" in follower_log.read_text()

        # bad input gets a clear error: a server that does not answer, an export that is not there
        _, err = unreachable.communicate(timeout=120)
        assert unreachable.returncode == 4 and "cannot reach TF Serving at 127.0.0.1:" in err, err[-2000:]
        _, err = missing.communicate(timeout=120)
        assert missing.returncode == 3 and str(tmp_path / "none") in err, err[-2000:]
    finally:
        for proc in (follower, missing, unreachable):
            if proc is not None:
                _stop(proc)
        server.stop()
