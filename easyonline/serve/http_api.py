"""HTTP in TensorFlow Serving's REST format, so existing clients work.

- ``POST /v1/models/<name>:predict`` with ``{"instances": [{input: value}, ...]}`` (answers
  ``{"predictions": [{"probs": p, "logits": l}, ...]}``) or ``{"inputs": {input: [values]}}``
  (answers ``{"outputs": {"probs": [...], "logits": [...]}}``); every output of the export is there, each
  task's under EasyRec's names (``y`` for a regression, ``probs_<tower>``, ``logits_<tower>``, ``y_<tower>``
  for a multi-task model's towers);
- ``GET /v1/models/<name>``: version, last applied step and sequence, update lag;
- ``GET /v1/models/<name>/metadata``: the signature defs, as TF Serving's GetModelMetadata;
- each also under ``/v1/models/<name>/versions/<version>`` (the loaded version; another is 404), and a
  predict body may name ``"signature_name": "serving_default"``;
- ``GET /metrics``: the same and request counters, in Prometheus text format;
- ``GET /ready`` (and ``/v1/models/<name>/ready``): 200 while the server is not known to differ from the
  trainer, 503 while it is behind (a lost or refused update, retention) until the next full sync.

Requests larger than ``max_request_bytes`` or with more than
``max_rows_per_request`` rows get 413, malformed ones 400 with the reason
(request_limits.py checks the sizes before any array is built);
the server keeps answering while updates are applied. It speaks HTTP/1.1
with keep-alive; a connection idle for ``idle_timeout_secs`` is closed (no
slowloris), and at most ``max_connections`` are open at once, one thread
each (more get 503 and are closed).
"""
import json
import logging
import re
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, Optional, Tuple

import numpy as np
from google.protobuf import json_format
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from easyonline.export.layout import SERVING_SIGNATURE, UPDATE_MESSAGE_SIGNATURE, UPDATE_SIGNATURE
from easyonline.serve.input_names import uneven_instance
from easyonline.serve.loaded_export import LoadedExport
from easyonline.serve.request_limits import BadRequest, TooManyRows, check_json_inputs
from easyonline.updates.signing import UpdateVerifier
from easyonline.serve.update_follower import UpdateFollower

log = logging.getLogger(__name__)
_DRAIN_LIMIT = 64 * 1024 * 1024  # a refused body up to this size is read and dropped, a larger one cut off


def request_inputs(body: dict) -> Tuple[Dict[str, list], bool]:
    """({input: values}, True for the row "instances" form) from a decoded request body."""
    if not isinstance(body, dict) or ("instances" in body) == ("inputs" in body):
        raise BadRequest('the body must be a JSON object with either "instances" or "inputs"')
    if "instances" in body:
        rows = body["instances"]
        if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
            raise BadRequest('"instances" must be a non-empty list of objects {input: value}')
        uneven = uneven_instance(rows)
        if uneven:
            raise BadRequest(uneven)
        names = set(rows[0])
        return {name: [r[name] for r in rows] for name in names}, True
    columns = body["inputs"]
    if not isinstance(columns, dict) or not columns:
        raise BadRequest('"inputs" must be a non-empty object {input: [values]}')
    out = {}
    for name, values in columns.items():
        out[name] = values if isinstance(values, list) else [values]
    return out, False


# Every reason a message is refused for (update_follower.py), each with a counter even while 0.
# unsigned, signature: updates/signing.py; too_large: an update over gRPC declaring more values than it holds.
REFUSAL_REASONS = ("malformed", "gap", "other_stream", "implausible_sequence", "inconsistent", "failed", "retention",
                   "unsigned", "signature", "too_large")

# Predict latency buckets, seconds: TF Serving's figures are a few ms at batch 1.
LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class ServingState:
    """What the handlers share: the model, the follower, counters."""

    def __init__(self, export: LoadedExport, follower: UpdateFollower, model_name: str, max_request_bytes: int,
                 max_rows_per_request: int = 10000, follows_updates: bool = True,
                 verifier: Optional[UpdateVerifier] = None, allow_unsigned_updates: bool = False):
        """``follows_updates`` False: the server does not read the stream; the update signatures over gRPC
        (grpc_api.py) are then how updates arrive, checked by update_admission.py: with ``verifier`` only
        updates the trainer signed, without it none unless ``allow_unsigned_updates``."""
        self.verifier, self.allow_unsigned_updates = verifier, allow_unsigned_updates
        self.export, self.follower, self.model_name = export, follower, model_name
        self.follows_updates = follows_updates
        self.max_request_bytes = max_request_bytes
        self.max_rows_per_request = max_rows_per_request
        self.requests: Dict[str, int] = {"ok": 0, "bad_request": 0, "too_large": 0, "not_found": 0, "error": 0,
                                         "over_capacity": 0, "update": 0}  # update: an update signature run over gRPC
        self.open_connections = 0
        self.predicted = 0
        self.predict_seconds = 0.0
        self.registry = CollectorRegistry(auto_describe=False)
        self.latency = Histogram("easyonline_serving_predict_latency_seconds",
                                 "time to score one predict request (parsing, lookup and model)",
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.started = time.time()
        self._lock = threading.Lock()

    def connection_opened(self, change: int = 1) -> None:
        """Counts a connection opened (``change`` -1: closed), for the open_connections gauge."""
        with self._lock:
            self.open_connections += change

    def count(self, outcome: str, samples: int = 0, seconds: float = 0.0) -> None:
        with self._lock:
            self.requests[outcome] += 1
            self.predicted += samples
            self.predict_seconds += seconds
        if samples:
            self.latency.observe(seconds)

    def status(self) -> dict:
        follower = self.follower
        lag = follower.lag_seconds() if self.follows_updates else None  # not reading the stream: unknown
        return {"model_version_status": [{"version": self.export.version, "state": "AVAILABLE",
                                          "status": {"error_code": "OK", "error_message": ""}}],
                "model_name": self.model_name, "export": self.export.path,
                "last_applied_step": follower.step, "last_applied_sequence": follower.last_sequence,
                "update_stream_id": follower.cursor.stream_id,
                "applied_updates": follower.applied, "skipped_updates": follower.skipped,
                "refused_updates": dict(follower.refused), "update_lag_messages": follower.lag_messages,
                "update_lag_seconds": None if lag is None else round(lag, 3), "update_error": follower.error,
                "ready": follower.ready, "behind": follower.behind,
                "seconds_since_update": round(follower.seconds_since_update(), 3),
                "full_syncs": follower.full_sync.completed, "removed_by_full_sync": follower.removed_by_sync}

    def readiness(self) -> Tuple[int, dict]:
        """(HTTP status, body) of the readiness endpoint: 503 while the server knows it is behind."""
        follower = self.follower
        body = {"ready": follower.ready, "behind": follower.behind,
                "behind_seconds": None if follower.behind_since is None else round(time.time() - follower.behind_since, 3),
                "seconds_since_update": round(follower.seconds_since_update(), 3)}
        return (200 if follower.ready else 503), body

    def predict_rows(self, signature_name: str, inputs: Dict[str, list]) -> int:
        """The rows of a predict request, after the checks both APIs make: the signature it names (none or
        serving_default) and the row limit. Raises BadRequest or TooManyRows with the reason."""
        if signature_name not in ("", SERVING_SIGNATURE):
            raise BadRequest(f"signature_name {signature_name!r}: predict serves {SERVING_SIGNATURE!r} "
                             f"({UPDATE_SIGNATURE!r} and {UPDATE_MESSAGE_SIGNATURE!r} apply updates; "
                             "the model's metadata lists them)")
        rows = max((len(v) for v in inputs.values()), default=0)
        if rows > self.max_rows_per_request:
            raise TooManyRows(f"request of {rows} rows is over the limit of {self.max_rows_per_request} "
                              "(--max_rows_per_request)")
        return rows

    def metadata(self) -> dict:
        """TF Serving's GetModelMetadata answer as its REST API gives it: the model spec and the signature
        defs in JSON (proto field names, every field printed)."""
        signatures = {name: json_format.MessageToDict(signature, preserving_proto_field_name=True,
                                                      including_default_value_fields=True)
                      for name, signature in self.export.signature_defs().items()}
        return {"model_spec": {"name": self.model_name, "signature_name": "", "version": self.export.version},
                "metadata": {"signature_def": {"signature_def": signatures}}}

    def metrics(self) -> str:
        follower = self.follower
        lines = []

        def gauge(name, value, help_text, labels=""):
            """A gauge, or a counter where the name says so (Prometheus: counters end in _total)."""
            lines.append(f"# HELP easyonline_serving_{name} {help_text}")
            lines.append(f"# TYPE easyonline_serving_{name} {'counter' if name.endswith('_total') else 'gauge'}")
            lines.append(f"easyonline_serving_{name}{labels} {value if value is not None else 'NaN'}")

        gauge("last_applied_step", follower.step, "global step of the newest applied update")
        gauge("last_applied_sequence", follower.last_sequence, "sequence number of the newest applied update")
        gauge("applied_updates_total", follower.applied, "update messages applied since start")
        gauge("skipped_updates_total", follower.skipped, "duplicate update messages skipped")
        lines.append("# HELP easyonline_serving_refused_updates_total update messages refused, by reason")
        lines.append("# TYPE easyonline_serving_refused_updates_total counter")
        for reason in sorted(set(REFUSAL_REASONS) | set(follower.refused)):
            lines.append(f'easyonline_serving_refused_updates_total{{reason="{reason}"}} {follower.refused[reason]}')
        gauge("update_lag_messages", follower.lag_messages, "update messages on the stream not yet read")
        gauge("update_lag_seconds", follower.lag_seconds() if self.follows_updates else None,
              "age of the newest applied update while behind")
        gauge("seconds_since_update", round(follower.seconds_since_update(), 3),
              "seconds since this server last applied an update message (since start when none)")
        gauge("behind", 0 if follower.ready else 1, "1 while the server knows it differs from the trainer "
              "(a lost or refused update, retention), until a full sync it applies whole")
        gauge("full_syncs_total", follower.full_sync.completed, "full syncs applied whole")
        gauge("removed_by_full_sync_total", follower.removed_by_sync,
              "rows removed because a full sync did not carry them")
        lines.append("# HELP easyonline_serving_requests_total HTTP requests by outcome")
        lines.append("# TYPE easyonline_serving_requests_total counter")
        for outcome, count in sorted(self.requests.items()):
            lines.append(f'easyonline_serving_requests_total{{outcome="{outcome}"}} {count}')
        gauge("open_connections", self.open_connections, "HTTP connections open now")
        gauge("predicted_samples_total", self.predicted, "samples scored since start")
        gauge("predict_seconds_total", round(self.predict_seconds, 6), "time spent scoring")
        return "\n".join(lines) + "\n" + generate_latest(self.registry).decode()


class Handler(BaseHTTPRequestHandler):
    server_version = "easyonline-serve"
    protocol_version = "HTTP/1.1"  # keep-alive: every answer has a Content-Length
    # An answer is written as headers, then body: with Nagle's algorithm on, the body waits for the
    # client's delayed ACK of the headers (40 ms a request on a kept-alive connection).
    disable_nagle_algorithm = True
    timeout = 30.0  # seconds a connection may stay idle or stall mid-request (set by make_server)
    state: ServingState  # set on the subclass made by make_server

    def log_message(self, fmt, *args):  # the access log goes to DEBUG, not stderr
        log.debug("%s " + fmt, self.address_string(), *args)

    def _send(self, code: int, body, content_type: str = "application/json") -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, code: int, outcome: str, message: str) -> None:
        self.state.count(outcome)
        self._send(code, {"error": message})

    def _model_resource(self, path: str) -> Optional[str]:
        """What ``path`` asks of the model ("", "/metadata", ":predict"), as TF Serving's paths name it, with or
        without ``/versions/<the loaded version>``; None for another path (answered 404 here)."""
        base = f"/v1/models/{self.state.model_name}"
        if path != base and not path.startswith((base + "/", base + ":")):
            self._error(404, "not_found", f"no such resource {path}; try {base}")
            return None
        rest = path[len(base):]
        versioned = re.match(r"/versions/([^/:]+)(.*)$", rest)
        if versioned:
            if versioned.group(1) != self.state.export.version:
                self._error(404, "not_found", f"version {versioned.group(1)} of {self.state.model_name} is not "
                                              f"served (serving version {self.state.export.version})")
                return None
            rest = versioned.group(2)
        return rest

    def do_GET(self):  # noqa: N802
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, self.state.metrics(), "text/plain; version=0.0.4")
            return
        if path == "/ready":
            self._send(*self.state.readiness())
            return
        resource = self._model_resource(path)
        if resource == "":
            self._send(200, self.state.status())
        elif resource == "/ready":
            self._send(*self.state.readiness())
        elif resource == "/metadata":
            self._send(200, self.state.metadata())
        elif resource is not None:
            self._error(404, "not_found", f"no such resource {path}; try /v1/models/{self.state.model_name}")

    def do_POST(self):  # noqa: N802
        path = self.path.split("?", 1)[0]
        resource = self._model_resource(path)
        if resource != ":predict":
            self.close_connection = True  # its body is not read
            if resource is not None:
                self._error(404, "not_found", f"POST /v1/models/{self.state.model_name}:predict, not {path}")
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self.close_connection = True
            self._error(411, "bad_request", "a Content-Length header is required")
            return
        if length < 0:
            self.close_connection = True
            self._error(400, "bad_request", f"Content-Length {length} is negative")
            return
        if length > self.state.max_request_bytes:
            self.close_connection = True
            if length <= _DRAIN_LIMIT:  # read it, so the client gets the answer rather than a reset
                left = length
                while left > 0:
                    chunk = self.rfile.read(min(left, 1 << 16))
                    if not chunk:
                        break
                    left -= len(chunk)
            self._error(413, "too_large", f"request of {length} bytes is over the limit of "
                                          f"{self.state.max_request_bytes} (--max_request_bytes)")
            return
        started = time.perf_counter()
        try:
            data = self.rfile.read(length)
            if len(data) < length:
                self.close_connection = True
                raise BadRequest(f"the body ended after {len(data)} of {length} bytes (Content-Length)")
            try:
                body = json.loads(data)
            except RecursionError:
                raise BadRequest("the JSON body is nested too deeply; each input takes one value a row") from None
            inputs, rows = request_inputs(body)
            check_json_inputs(inputs, self.state.max_rows_per_request)  # before any array is built
            self.state.predict_rows(body.get("signature_name", SERVING_SIGNATURE), inputs)
            out = self.state.export.predict(inputs)
        except TooManyRows as e:
            self._error(413, "too_large", str(e))
            return
        except ValueError as e:  # BadRequest and JSONDecodeError are ValueErrors
            self._error(400, "bad_request", str(e))
            return
        except Exception as e:  # pylint: disable=broad-except
            log.exception("predict failed")
            self._error(500, "error", f"{type(e).__name__}: {e}")
            return
        samples = len(next(iter(out.values())))
        self.state.count("ok", samples, time.perf_counter() - started)
        out = {name: np.asarray(v).tolist() for name, v in out.items()}
        if rows:
            self._send(200, {"predictions": [{name: out[name][i] for name in out} for i in range(samples)]})
        else:
            self._send(200, {"outputs": out})


class BoundedHTTPServer(ThreadingHTTPServer):
    """One thread per connection, at most ``max_connections`` at once; one more gets 503 and is closed."""

    daemon_threads = True
    # the listen backlog: a burst of connections beyond it is not refused but left half-open by the kernel,
    # and waits for its 1 s SYN-ACK retransmit (a predict stalled a second behind idle connects); the
    # kernel caps it at net.core.somaxconn
    request_queue_size = 1024

    def __init__(self, address, handler, state: ServingState, max_connections: int,
                 tls: Optional[ssl.SSLContext] = None):
        super().__init__(address, handler)
        self.state = state
        self._slots = threading.BoundedSemaphore(max_connections)
        self._tls = tls

    def get_request(self):
        request, address = super().get_request()
        if self._tls is not None:  # the handshake runs in the connection's thread (process_request_thread)
            request = self._tls.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
        return request, address

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            self.state.count("over_capacity")
            try:
                body = b'{"error": "too many open connections; retry later"}'
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                                b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        self.state.connection_opened()
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            if self._tls is not None:
                try:
                    request.settimeout(self.RequestHandlerClass.timeout)
                    request.do_handshake()
                except (OSError, ssl.SSLError):  # no certificate, an untrusted one, a plain-text client, a stall
                    self.shutdown_request(request)
                    return
            super().process_request_thread(request, client_address)
        finally:
            self.state.connection_opened(-1)
            self._slots.release()

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (socket.timeout, ConnectionError)):
            return  # an idle or vanished client: nothing to report
        super().handle_error(request, client_address)


def make_server(state: ServingState, host: str, port: int, idle_timeout_secs: float = 30.0,
                max_connections: int = 1024, tls: Optional[ssl.SSLContext] = None) -> ThreadingHTTPServer:
    """The HTTP server on ``host:port`` (HTTPS with ``tls``, serve/tls.py); call ``serve_forever()``."""
    handler = type("BoundHandler", (Handler,), {"state": state, "timeout": idle_timeout_secs})
    return BoundedHTTPServer((host, port), handler, state, max_connections, tls)
