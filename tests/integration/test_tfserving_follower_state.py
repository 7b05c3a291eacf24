"""tools.tfserving_follower asks the server what it holds before it sends (tools/served_state.py).

As in test_tfserving_follower.py, ``easyonline.serve --grpc_port --follow_updates=false`` stands in for TF
Serving. The update stream is a directory the test releases message by message, so each check happens at a
chosen point of the stream:

- a dropped connection (a TCP proxy between follower and server, stopped and started again) resends nothing;
  a restarted server (SIGKILL, a new one on the export) gets everything since the export again;
- another writer of the same server (a second feeder) is logged as an error naming the cause;
- TF Serving loading a newer export version, while the older one is still loaded, never gets a batch older
  than that export. Stock TF Serving answers unversioned requests from the newest loaded version and
  versioned ones from that version; here each version is a server of its own behind a small gRPC router in
  the test that routes exactly so, and records what each version was sent.
"""
import collections
import os
import shutil
import socket
import subprocess
import threading
import time
from typing import Dict, List, Optional

import pytest

from easyonline.export.export_info import ExportInfo
from easyonline.jobs.online_train import build_trainer
from easyonline.protos import update_pb2
from easyonline.tools.stream_producer import SyntheticCtrStream
from easyonline.updates.readers import DONE_SUFFIX, list_update_files, update_file_name
from easyonline.utils.net import free_port
from easyonline.utils import preloaded_python
from tests.conftest import PYTHON, online_config, python_env
from tests.integration.test_export_serve import Server, _wait
from tests.integration.test_stock_serving_export import export_in_one_process
from tests.integration.test_tfserving_follower import SIGNED, _stop


class Stream:
    """The trainer's update directory, its messages withheld and released in sequence order."""

    def __init__(self, directory):
        self.directory = str(directory)
        self.held = self.directory + ".held"
        os.makedirs(self.held, exist_ok=True)
        (self.stream, self.sequences), = list_update_files(self.directory).items()

    def withhold_all(self) -> None:
        for name in os.listdir(self.directory):
            os.rename(os.path.join(self.directory, name), os.path.join(self.held, name))

    def release(self, up_to: int) -> None:
        """Makes the messages up to sequence ``up_to`` readable (the message first, then its done-file)."""
        for sequence in self.sequences:
            name = update_file_name(sequence, self.stream)
            if sequence <= up_to and os.path.exists(os.path.join(self.held, name)):
                for part in (name, name + DONE_SUFFIX):
                    os.rename(os.path.join(self.held, part), os.path.join(self.directory, part))

    def message(self, sequence: int) -> bytes:
        name = update_file_name(sequence, self.stream)
        for where in (self.directory, self.held):
            if os.path.exists(os.path.join(where, name)):
                with open(os.path.join(where, name), "rb") as f:
                    return f.read()
        raise FileNotFoundError(name)


class TcpProxy:
    """127.0.0.1:port forwarded to a server's port; ``stop`` drops every connection, as a proxy restarting
    (or a GOAWAY and close at a maximum connection age) does, while the server keeps running."""

    def __init__(self, upstream: int):
        self.upstream, self.port = upstream, free_port()
        self._sockets: List[socket.socket] = []
        self._listener: Optional[socket.socket] = None
        self.connections = 0

    def start(self) -> "TcpProxy":
        self._listener = socket.create_server(("127.0.0.1", self.port))  # SO_REUSEADDR: the same port again
        self._listener.settimeout(0.2)
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()
        return self

    def _accept(self, listener: socket.socket) -> None:
        while listener is self._listener:
            try:
                client, _ = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:  # the server is down (restarting): so is this connection
                client.close()
                continue
            self._sockets += [client, server]
            self.connections += 1
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        for s in self._sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        self._sockets = []


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(tmp_path, the update Stream, version 1 exported at step 2 into export/, version 2 at step 4 into later/)."""
    tmp_path = tmp_path_factory.mktemp("follower_state")
    data = tmp_path / "train.csv"
    data.write_bytes(b"\n".join(SyntheticCtrStream().lines(0, 3000)) + b"\n")
    config = online_config(tmp_path / "m", **{
        "data_config.batch_size": 500, "train_config.save_checkpoints_secs": 0,
        "train_config.save_checkpoints_steps": 2, "train_config.keep_checkpoint_max": 5,
        "train_config.incr_save_config": {"sparse_save_steps": 1, "dense_save_steps": 1, "signing_secret": SIGNED,
                                          "fs": {"incr_save_dir": str(tmp_path / "updates")}}})
    config.ClearField("kafka_train_input")
    config.file_train_input.paths.append(str(data))
    build_trainer(config, online=False).run()
    # both versions exported by one process (one TensorFlow import), the later one with the later version name
    versions = export_in_one_process(tmp_path / "m", *[
        (tmp_path / where, {"checkpoint_path": f"{tmp_path / 'm'}/model.ckpt-{step}", "for_stock_serving": True})
        for step, where in ((2, "export"), (4, "later"))])
    return tmp_path, Stream(tmp_path / "updates"), versions[0], versions[1]


def _start_position(version_dir: str) -> int:
    return int(ExportInfo.read(version_dir).update_info["sequence"])


def _follower(export_dir, target: str, log_path):
    with open(log_path, "ab") as log:
        return preloaded_python.Popen([PYTHON, "-m", "easyonline.tools.tfserving_follower", f"--export_dir={export_dir}",
                                 f"--target={target}", "--model_name=m", "--status_secs=0.5"],
                                env=python_env(), stdout=log, stderr=subprocess.STDOUT)


def _events(log_path) -> str:
    """The follower's log without its status lines: what it did, for an assertion's message."""
    return "\n".join(line for line in log_path.read_text(errors="replace").splitlines() if " batches=" not in line)[-4000:]


def _predict_update(port: int, messages: List[bytes]):
    import grpc  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc  # pylint: disable=g-import-not-at-top
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "m"
    request.model_spec.signature_name = "incr_update_message_sig"
    request.inputs["messages"].CopyFrom(tf.make_tensor_proto(messages, dtype=tf.string, shape=[len(messages)]))
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=60)


def test_a_dropped_connection_resends_nothing_a_restarted_server_everything_another_writer_is_named(trained):
    tmp_path, stream, version, _ = trained
    stream.withhold_all()
    start, last = _start_position(version), stream.sequences[-1]
    assert last - start >= 2  # messages newer than the export, one kept for the other writer's check
    export_dir, grpc_port = tmp_path / "export", free_port()
    flags = (f"--grpc_port={grpc_port}", "--follow_updates=false")
    log_path = tmp_path / "drop.log"
    server = Server(export_dir, tmp_path / "drop_serve.log", *flags)
    proxy = TcpProxy(grpc_port).start()
    follower = _follower(export_dir, f"127.0.0.1:{proxy.port}", log_path)
    try:
        stream.release(last - 1)
        assert _wait(lambda: server.status()["last_applied_sequence"] == last - 1, 120), _events(log_path)
        applied = server.status()["applied_updates"]
        assert applied == last - start  # each message newer than the export, once

        # the connection drops (the server keeps running): nothing is sent again
        proxy.stop()
        time.sleep(1.0)
        proxy.start()
        assert _wait(lambda: "still holds sequence" in log_path.read_text() or "resending" in log_path.read_text(),
                     60), _events(log_path)
        time.sleep(2.0)  # what a replay would have sent by now
        assert proxy.connections >= 2  # the follower did reconnect
        assert server.status()["applied_updates"] == applied, _events(log_path)
        assert "resending" not in log_path.read_text()

        # the server restarts (SIGKILL, a new one reloads the export): everything since the export is sent again
        server.kill()
        server = Server(export_dir, tmp_path / "drop_serve2.log", *flags)
        assert _wait(lambda: server.status()["last_applied_sequence"] == last - 1, 120), _events(log_path)
        assert server.status()["applied_updates"] == last - start
        assert "holds none of the updates it acknowledged" in log_path.read_text()

        # another writer sends the server the next message before the follower does (the stand-in, like serve,
        # drops an older one as a replay; TF Serving would apply that too): the follower names it before its
        # next batch
        assert "another writer" not in log_path.read_text()
        _predict_update(grpc_port, [stream.message(last)])
        stream.release(last)
        assert _wait(lambda: server.status()["last_applied_sequence"] == last, 60), _events(log_path)
        assert _wait(lambda: " conflicts=1" in log_path.read_text(), 30), _events(log_path)
        text = log_path.read_text()
        assert f"holds sequence {last}, but this follower left it at {last - 1}: another writer" in text
        assert "several servers" in text and "one follower per server" in text
        assert _stop(follower) == 0
    finally:
        _stop(follower)
        proxy.stop()
        server.stop()


class VersionRouter:
    """TF Serving's answer to a model with several loaded versions, from one server per version: an
    unversioned request goes to the newest loaded version, a versioned one to that version (NOT_FOUND when it
    is not loaded). Records the sequences of every update batch each version was sent."""

    def __init__(self):
        self.backends: Dict[str, object] = {}
        self.sent: Dict[str, List[List[int]]] = collections.defaultdict(list)

    def load(self, version: str, grpc_port: int) -> None:
        import grpc  # pylint: disable=g-import-not-at-top
        from tensorflow_serving.apis import prediction_service_pb2_grpc  # pylint: disable=g-import-not-at-top
        self.backends[version] = prediction_service_pb2_grpc.PredictionServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{grpc_port}"))

    def start(self) -> int:
        import concurrent.futures  # pylint: disable=g-import-not-at-top
        import grpc  # pylint: disable=g-import-not-at-top
        import tensorflow as tf  # pylint: disable=g-import-not-at-top
        from tensorflow_serving.apis import prediction_service_pb2_grpc  # pylint: disable=g-import-not-at-top
        router = self

        class Service(prediction_service_pb2_grpc.PredictionServiceServicer):
            def _backend(self, spec, context):
                version = str(spec.version.value) if spec.HasField("version") else \
                    max(router.backends, key=int, default="")
                if version not in router.backends:
                    context.abort(grpc.StatusCode.NOT_FOUND, f"Servable not found for request: {spec.name} {version}")
                return version, router.backends[version]

            def Predict(self, request, context):  # pylint: disable=invalid-name
                version, stub = self._backend(request.model_spec, context)
                if request.model_spec.signature_name == "incr_update_message_sig":
                    batch = tf.make_ndarray(request.inputs["messages"]).reshape(-1)
                    if len(batch):
                        router.sent[version].append(
                            [update_pb2.UpdateMessage.FromString(m).header.sequence for m in batch])
                try:
                    return stub.Predict(request, timeout=60)
                except grpc.RpcError as e:
                    context.abort(e.code(), e.details())

            def GetModelMetadata(self, request, context):  # pylint: disable=invalid-name
                _, stub = self._backend(request.model_spec, context)
                try:
                    return stub.GetModelMetadata(request, timeout=60)
                except grpc.RpcError as e:
                    context.abort(e.code(), e.details())

        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Service(), self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        return port


def test_a_newer_version_never_gets_a_batch_older_than_its_export(trained):
    tmp_path, stream, first, later = trained
    stream.withhold_all()
    export_dir = tmp_path / "switch"
    shutil.rmtree(export_dir, ignore_errors=True)
    os.makedirs(export_dir)
    shutil.copytree(first, export_dir / os.path.basename(first))
    v1, v2 = os.path.basename(first), os.path.basename(later)
    start1, start2, last = _start_position(first), _start_position(later), stream.sequences[-1]
    assert int(v2) > int(v1) and start1 <= start2 - 2 and last > start2  # messages on both sides of version 2
    log_path = tmp_path / "switch.log"
    router = VersionRouter()
    ports = [free_port(), free_port()]
    servers = [Server(export_dir / v1, tmp_path / "v1.log", f"--grpc_port={ports[0]}", "--follow_updates=false")]
    router.load(v1, ports[0])
    follower = _follower(export_dir, f"127.0.0.1:{router.start()}", log_path)
    try:
        stream.release(start2 - 2)
        assert _wait(lambda: router.sent[v1] and router.sent[v1][-1][-1] == start2 - 2, 120), \
            _events(log_path)
        # version 2 is exported and TF Serving loads it (version 1 still loaded); then the rest is published
        shutil.copytree(later, export_dir / v2)
        servers.append(Server(export_dir / v2, tmp_path / "v2.log", f"--grpc_port={ports[1]}",
                              "--follow_updates=false"))
        router.load(v2, ports[1])
        stream.release(last)
        # (the router records a batch before the server applies it)
        assert _wait(lambda: router.sent[v2] and router.sent[v2][-1][-1] == last
                     and servers[1].status()["last_applied_sequence"] == last, 120), _events(log_path)
        older = [batch for batch in router.sent[v2] if min(batch) < start2]
        assert not older, f"version {v2} (export at sequence {start2}) was sent {older}"
        assert f"serves version {v2}, not {v1}" in log_path.read_text()
        assert _stop(follower) == 0
    finally:
        _stop(follower)
        router.server.stop(0)
        for server in servers:
            server.stop()
