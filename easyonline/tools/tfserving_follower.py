"""Keeps a TF Serving model fresh: reads the update stream and applies it through the update signature over gRPC.

    python -m easyonline.tools.tfserving_follower --export_dir /models/ctr --target 127.0.0.1:8500 \\
        --model_name ctr [--kafka_config sasl_plain_password=${KAFKA_PASSWORD} ...]

Stock TF Serving loads an export (easyonline.export) and answers its
signatures, but it reads no Kafka: this follower does, for it. It starts
where the newest version in --export_dir says (its assets/incr_update.txt),
reads the update topic (or directory) with the same reader and ordering
rules as ``easyonline.serve`` (serve/update_follower.py: duplicates skipped,
a gap or a refused message leaves the model behind until the next full sync,
said in the log), and sends the messages of each poll, as published, in one
``PredictionService.Predict`` call of signature ``incr_update_message_sig``;
the answer's ``last_sequence`` is checked against what was sent.

Before each batch it asks the server what it holds (tools/served_state.py:
an empty call of the update signature answers the version serving
unversioned requests and the last sequence that version applied since it
was loaded), and sends the batch to that version only (``model_spec.version``
set: a version TF Serving unloaded meanwhile answers NOT_FOUND instead of
another version applying it):

- another version than the one fed (TF Serving loaded a newer export): the
  follower starts again from that version's own start position, so the new
  version never gets a batch older than its export;
- the sequence this follower last had acknowledged: nothing is resent, even
  after the connection dropped (a proxy's GOAWAY, a max connection age) or the
  server was unreachable for a while;
- nothing (-1): the server reloaded its export (restarted) and lost what it
  was sent: the follower resends from the export's start position (read
  again). Messages carry absolute values and are applied in order, so
  applying them again ends where the stream is;
- another sequence: another writer feeds this server, or --target reaches
  several servers (a Service balancing replicas): logged as an error and
  counted (``conflicts``); one follower per server, next to it.

An export made before the update signature said what it holds cannot tell a
dropped connection from a restart: then every broken connection resends from
the export's position, as it must to be safe.

Rows the trainer removed are removed by the messages that say so; rows a
full sync did not carry cannot be listed over TF Serving's API, so they stay
until the server loads a newer export.

One status line every --status_secs (messages applied, batches, the last
sequence and global step the server acknowledged, the lag in messages, and
whether the model is behind). Stops on SIGTERM or Ctrl-C.
"""
import logging
import os
import signal
import sys
import threading
import time
from typing import Dict, List, Optional

import grpc
from absl import flags

from easyonline.config.kafka_settings import consumer_settings_from_flags
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.errors import ConfigError
from easyonline.export.export_info import ExportInfo
from easyonline.export.layout import UPDATE_MESSAGE_SIGNATURE
from easyonline.jobs.serve_cli import define_update_kafka_config_flag
from easyonline.protos import update_pb2
from easyonline.serve.status_log import broker_outage
from easyonline.serve.update_follower import UpdateFollower
from easyonline.tools import served_state
from easyonline.updates.apply_rules import message_changes
from easyonline.utils.cli import run_command
from easyonline.utils.logs import setup_logging

tf = ensure_legacy_keras()
from tensorflow_serving.apis import (get_model_metadata_pb2, predict_pb2,  # noqa: E402  pylint: disable=g-import-not-at-top
                                     prediction_service_pb2_grpc)

log = logging.getLogger("easyonline.tfserving_follower")
FLAGS = flags.FLAGS
# The server is restarting or loading: wait for it, then resend from the export's start.
RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.NOT_FOUND)


class ServerUnusable(Exception):
    """The target cannot be followed (unreachable, no such model, no update signature); the text says why."""


class TfServingTarget:
    """The update stream's target (serve/update_follower.py's UpdateTarget): one model on a PredictionService.

    ``apply`` checks a message against the export's parameters (as serve does) and adds it to the batch;
    ``after_poll`` sends the batch in one Predict, after asking the server what it holds (served_state.py),
    or rewinds the follower to the start position of the export the server holds.
    """

    can_list_rows = False
    cannot_list_rows_why = ("rows it did not carry cannot be listed over TF Serving's API: they stay until the "
                            "server loads a newer export")

    def __init__(self, export_dir: str, target: str, model_name: str, max_batch_bytes: int = 4 << 20,
                 rpc_timeout_secs: float = 30.0, stop: Optional[threading.Event] = None):
        self.export_dir, self.target, self.model_name = export_dir, target, model_name
        self.max_batch_bytes, self.rpc_timeout_secs = max_batch_bytes, rpc_timeout_secs
        self.stop_event = stop or threading.Event()
        self.reload()
        # A connection that breaks (a server restarting, which reloads its export) is seen even when no call
        # failed: the resend must not wait for one. The idle timeout is off, so that only a break counts.
        self._channel = grpc.insecure_channel(target, options=[("grpc.client_idle_timeout_ms", 2 ** 31 - 1)])
        self._stub = prediction_service_pb2_grpc.PredictionServiceStub(self._channel)
        self._connected = False
        self._connection_lost = False
        self._channel.subscribe(self._on_connectivity, try_to_connect=True)
        self.follower: Optional[UpdateFollower] = None  # set by follow()
        self._batch: List[bytes] = []
        self._batch_bytes = 0
        self._last_header: Optional[update_pb2.UpdateHeader] = None
        self._rewind_pending = False
        self.acked = 0  # messages the server applied (its answers' count, since start)
        self.batches = 0
        self.resends = 0  # times the follower started again from the export's position
        self.conflicts = 0  # times the server held a sequence this follower did not leave it at
        self._next_conflict_log = 0.0
        self.last_sequence: Optional[int] = None  # the server's last answer, since the last (re)start
        self.last_step: Optional[int] = None
        self._served_version: Optional[str] = None  # the version the server answered from, when not the export's

    def reload(self, version: Optional[str] = None) -> None:
        """Reads the export's assets again (where the stream starts, the parameters): of ``version``, the one
        the server answered from, else of the newest version."""
        path = self.export_dir
        if version is not None and os.path.basename(os.path.normpath(path)) != version:
            path = os.path.join(path, version)
        self.info = ExportInfo.read(path)
        self.update_info, self.config = self.info.update_info, self.info.config

    def _on_connectivity(self, state: grpc.ChannelConnectivity) -> None:
        """gRPC's callback: a READY connection that goes away means the server may have restarted."""
        if state == grpc.ChannelConnectivity.READY:
            self._connected = True
        elif self._connected and state != grpc.ChannelConnectivity.CONNECTING:
            self._connected = False
            self._connection_lost = True

    def check_server(self, timeout_secs: float) -> None:
        """Waits up to ``timeout_secs`` for the server to answer; ServerUnusable when it does not, serves no
        model ``model_name``, or the model has no update signature."""
        deadline = time.time() + timeout_secs
        while True:
            try:
                signatures = self._signatures(min(10.0, max(deadline - time.time(), 1.0)))
                break
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.NOT_FOUND:
                    raise ServerUnusable(f"the server at {self.target} has no model {self.model_name!r} "
                                         f"({e.details()})") from None
                if e.code() not in RETRIED or time.time() >= deadline or self.stop_event.is_set():
                    raise ServerUnusable(f"cannot reach TF Serving at {self.target} within {timeout_secs:.0f} s "
                                         f"({e.code().name}: {e.details()})") from None
                self.stop_event.wait(1.0)
        if UPDATE_MESSAGE_SIGNATURE not in signatures:
            raise ServerUnusable(f"model {self.model_name!r} at {self.target} has no signature "
                                 f"{UPDATE_MESSAGE_SIGNATURE!r} (it has {sorted(signatures)}): serve an export of "
                                 "easyonline.export")

    def _signatures(self, timeout: float) -> List[str]:
        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        request.model_spec.name = self.model_name
        response = self._stub.GetModelMetadata(request, timeout=timeout)
        signatures = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signatures)
        return list(signatures.signature_def)

    def apply(self, message: update_pb2.UpdateMessage) -> int:
        """Checks the message against the export's parameters (ValueError: refused, as serve refuses it) and
        adds it to the batch; 0 while a resend is pending (it is read again then)."""
        if self._rewind_pending:
            return 0
        message_changes(message, self.info.widths, self.info.dense_shapes)
        data = message.SerializeToString(deterministic=True)  # the bytes the trainer signed (codec.py)
        if self._batch and self._batch_bytes + len(data) > self.max_batch_bytes:
            self._send()
            if self._rewind_pending:
                return 0
        self._batch.append(data)
        self._batch_bytes += len(data)
        self._last_header = message.header
        return 1

    def held_keys(self) -> Dict:
        raise NotImplementedError(self.cannot_list_rows_why)

    def remove_rows(self, keys: Dict) -> int:
        raise NotImplementedError(self.cannot_list_rows_why)

    def after_poll(self) -> None:
        """Sends the poll's batch; after the connection broke (with no call in flight: idle) it asks the server
        what it holds even without one; then starts again from the export's position if it must."""
        if self._connection_lost and not self._rewind_pending:
            self._connection_lost = False
            log.warning("the connection to %s broke: asking the server what it holds", self.target)
            self._check_server_state(None, reconnected=True)
        self._send()
        if self._rewind_pending and not self.stop_event.is_set():
            self._batch, self._batch_bytes, self._last_header = [], 0, None  # read again after the rewind
            self._connection_lost = False
            self.reload(self._served_version)
            self.follower.rewind()
            self._rewind_pending, self._served_version, self.last_sequence = False, None, None
            self.resends += 1
            log.info("resending from the export's start position (version %s, sequence %s)", self.info.version,
                     self.update_info.get("sequence"))

    def _ask(self) -> served_state.Served:
        """What the server holds (served_state.ask); waits for a server that does not answer."""
        while True:
            try:
                return served_state.ask(self._stub, self.model_name, self.rpc_timeout_secs)
            except grpc.RpcError as e:
                if e.code() not in RETRIED or self.stop_event.is_set():
                    raise
                self._wait_for_server(e)

    def _check_server_state(self, pending: Optional[int], reconnected: bool = False) -> bool:
        """Asks the server what it holds and acts on it (the module docstring); True when the batch ending at
        sequence ``pending`` is to be sent, False when it must not be (a rewind is pending), or when the server
        already holds it (a call that failed after it was applied)."""
        try:
            served = self._ask()
        except grpc.RpcError as e:  # the server refuses the question: send as before, unchecked
            if self.stop_event.is_set():
                return False
            log.warning("the server at %s does not say what it holds (%s: %s)", self.target, e.code().name,
                        e.details())
            return not self.stop_event.is_set()
        if self.stop_event.is_set():
            return False
        verdict = served_state.judge(served, self.info.version, self.last_sequence)
        if verdict == served_state.OTHER_VERSION:
            log.warning("the server serves version %s, not %s (it loaded another export): following from that "
                        "version's start position", served.version, self.info.version)
            self._served_version, self._rewind_pending = served.version, True
        elif verdict == served_state.UNKNOWN:
            if reconnected or pending is None:  # an older export: a broken connection may be a restart
                log.warning("the export does not say what the server holds (made before %r existed): after the "
                            "broken connection, resending from the export's start position", served_state.HELD_OUTPUT)
                self._rewind_pending = True
        elif verdict == served_state.LOST:
            log.warning("the server at %s holds none of the updates it acknowledged (up to sequence %d): it "
                        "reloaded version %s (restarted); resending from the export's start position", self.target,
                        self.last_sequence, served.version or self.info.version)
            self._rewind_pending = True
        elif verdict == served_state.OTHER_WRITER and (served.held != pending or not reconnected):
            self._conflict(served.held, self.last_sequence)  # (holding the batch not yet sent: someone else sent it)
            self.last_sequence = served.held
        elif verdict == served_state.OTHER_WRITER:  # the failed call was applied: it holds the batch
            self.last_sequence = served.held
            return False
        elif reconnected:
            log.info("the server at %s still holds sequence %s: nothing resent", self.target, self.last_sequence)
        return not self._rewind_pending

    def _conflict(self, held: int, left: Optional[int]) -> None:
        self.conflicts += 1
        if time.time() >= self._next_conflict_log:
            self._next_conflict_log = time.time() + 30.0
            log.error("the server at %s holds sequence %d, but this follower left it at %d: another writer feeds "
                      "it (a second follower of the same server?), or %s reaches several servers (a Service "
                      "balancing replicas: only one of them would be kept fresh). Run one follower per server, "
                      "next to it (a sidecar with --target 127.0.0.1:<port>)", self.target, held, left,
                      self.target)

    def _send(self) -> None:
        if not self._batch or self._rewind_pending:  # a pending rewind reads the batch again
            return
        batch, last = self._batch, self._last_header
        self._batch, self._batch_bytes, self._last_header = [], 0, None
        request = predict_pb2.PredictRequest()
        request.model_spec.name = self.model_name
        request.model_spec.signature_name = UPDATE_MESSAGE_SIGNATURE
        if self.info.version.isdigit():  # to the version fed only: never to a newer one
            request.model_spec.version.value = int(self.info.version)
        request.inputs["messages"].CopyFrom(tf.make_tensor_proto(batch, dtype=tf.string, shape=[len(batch)]))
        retried = False
        while True:
            if not self._check_server_state(last.sequence, reconnected=retried):
                return
            expected = self.last_sequence
            try:
                response = self._stub.Predict(request, timeout=self.rpc_timeout_secs)
                break
            except grpc.RpcError as e:
                if e.code() not in RETRIED:  # the server refused the batch (a message its graph does not take)
                    self.follower.refuse("failed", f"the server refused {len(batch)} message(s) up to sequence "
                                                   f"{last.sequence}: {e.code().name}: {e.details()}")
                    return
                self._wait_for_server(e)  # then ask again: was it applied, did the server restart?
                self._connection_lost, retried = False, True
                if self.stop_event.is_set():
                    return
        sequence = int(tf.make_ndarray(response.outputs["last_sequence"]))
        self.last_step = int(tf.make_ndarray(response.outputs["last_global_step"]))
        self.last_sequence = sequence
        self.acked += len(batch)
        self.batches += 1
        if sequence != last.sequence:
            self.follower.refuse("failed", f"the server applied up to sequence {sequence}, sent up to "
                                           f"{last.sequence}")
        if served_state.HELD_OUTPUT in response.outputs:  # what it held just before: a restart since the question
            previous = int(tf.make_ndarray(response.outputs[served_state.HELD_OUTPUT]))
            if expected is not None and previous != expected:
                if previous == served_state.NOTHING_HELD:
                    log.warning("the server at %s had reloaded its export just before this batch (it restarted): "
                                "resending from the export's start position", self.target)
                    self._rewind_pending = True
                else:
                    self._conflict(previous, expected)

    def _wait_for_server(self, error: Optional[grpc.RpcError]) -> None:
        """Retries with backoff until the server answers for the model again (or the follower stops)."""
        if error is not None:
            log.warning("TF Serving at %s unavailable (%s: %s): retrying with backoff, then asking what it "
                        "holds", self.target, error.code().name, error.details())
        backoff, started = 0.5, time.time()
        while not self.stop_event.is_set():
            try:
                self._signatures(5.0)
                log.info("TF Serving at %s answers again after %.1f s", self.target, time.time() - started)
                return
            except grpc.RpcError:
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, 4.0)

    def follow(self, kafka_settings: Optional[Dict] = None, on_fatal=None) -> UpdateFollower:
        """Starts reading the stream in a thread (UpdateFollower, with this target); ``on_fatal``: called when
        Kafka refuses the reader (UpdateFollower.fatal)."""
        self.follower = UpdateFollower(self, kafka_settings=kafka_settings)  # type: ignore[arg-type]
        self.follower.after_poll = self.after_poll
        self.follower.on_fatal = on_fatal
        if self.follower.location is None:
            raise ServerUnusable(f"the export {self.info.path} names no update stream (its incr_update.txt)")
        return self.follower.start()

    def status_line(self) -> str:
        follower = self.follower
        lag = "unknown" if follower.lag_messages is None else f"{follower.lag_messages} msgs"
        return (f"applied={self.acked} batches={self.batches} seq={self.last_sequence} step={self.last_step} "
                f"lag={lag} behind={follower.behind or 'no'} refused={dict(follower.refused)} "
                f"resends={self.resends} conflicts={self.conflicts}")

    def close(self) -> None:
        self._channel.close()


def define_flags() -> None:
    flags.DEFINE_string("export_dir", None, "The export TF Serving serves (a directory of versions, or one): the "
                        "newest version's assets/incr_update.txt says where the update stream starts.")
    flags.DEFINE_string("target", "127.0.0.1:8500", "host:port of TF Serving's gRPC API (tensorflow_model_server "
                        "--port; easyonline.serve --grpc_port with --follow_updates=false).")
    flags.DEFINE_string("model_name", "", "The model's name on the server (--model_name of "
                        "tensorflow_model_server); default: the export's model name.")
    flags.DEFINE_integer("max_batch_bytes", 4 << 20, "Messages sent in one Predict call at most this many bytes "
                         "(one message at least); keep it under the server's gRPC receive limit.")
    flags.DEFINE_float("rpc_timeout_secs", 30.0, "Deadline of one Predict call; a call past it is handled as an "
                       "outage (wait for the server, then ask it what it holds).")
    flags.DEFINE_float("connect_timeout_secs", 60.0, "How long to wait at start for the server to answer before "
                       "exiting with an error (exit code 4).")
    flags.DEFINE_float("status_secs", 5.0, "Seconds between status lines in the log.")
    define_update_kafka_config_flag()
    flags.DEFINE_string("log_level", "INFO", "Python log level: DEBUG, INFO, WARNING, ERROR.")


def main(argv) -> int:
    del argv
    setup_logging(FLAGS.log_level)
    if not FLAGS.export_dir:
        print("error: --export_dir is required", file=sys.stderr)
        return 2
    host, sep, port = FLAGS.target.rpartition(":")
    if not sep or not host or not port.isdigit():
        print(f"error: --target {FLAGS.target!r}: expected host:port", file=sys.stderr)
        return 2
    if FLAGS.max_batch_bytes < 1 or FLAGS.rpc_timeout_secs <= 0 or FLAGS.status_secs <= 0:
        print("error: --max_batch_bytes, --rpc_timeout_secs and --status_secs must be positive", file=sys.stderr)
        return 2
    try:
        kafka_settings = consumer_settings_from_flags(FLAGS.kafka_config, "--kafka_config")
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    stopped = threading.Event()
    try:
        target = TfServingTarget(FLAGS.export_dir, FLAGS.target, "", FLAGS.max_batch_bytes, FLAGS.rpc_timeout_secs,
                                 stopped)
    except (OSError, ValueError) as e:  # no export, an unreadable incr_update.txt
        print(f"error: --export_dir {FLAGS.export_dir}: {e}", file=sys.stderr)
        return 3
    target.model_name = FLAGS.model_name or target.update_info.get("model_name") or "model"

    def stop(*_):
        stopped.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        target.check_server(FLAGS.connect_timeout_secs)
        follower = target.follow(kafka_settings, on_fatal=stop)
    except ServerUnusable as e:
        print(f"error: {e}", file=sys.stderr)
        target.close()
        return 4
    log.info("following %s for model %r at %s from sequence %s (export version %s)",
             follower.location.description, target.model_name, FLAGS.target, follower.cursor.next_sequence,
             target.info.version)
    while not stopped.wait(FLAGS.status_secs):
        outage = broker_outage(follower)
        if outage is not None:
            log.warning("%s", outage)
        log.info("%s", target.status_line())
    follower.stop()
    target.close()
    log.info("stopped: %s", target.status_line())
    if follower.fatal is not None:
        print(f"error: {follower.fatal}", file=sys.stderr)
        return follower.fatal.exit_code
    return 0


def run() -> None:
    run_command(define_flags, main)


if __name__ == "__main__":
    run()
