"""TF Serving's gRPC PredictionService (``Predict``, ``GetModelMetadata``) on ``serve --grpc_port``.

The same model, counters and limits as the REST API (http_api.py): a client
written for TF Serving's gRPC API (``tensorflow_serving.apis``) works
unchanged, with this model's name, ``serving_default`` (or no signature
name) and the served version or none. Bad requests get INVALID_ARGUMENT
naming the input, too many rows RESOURCE_EXHAUSTED, another model or
version NOT_FOUND, a signature the export lacks FAILED_PRECONDITION (TF
Serving's answer). The update signatures (incr_update_sig,
incr_update_message_sig) run as TF Serving runs them, inputs and outputs by
name, when the server does not follow the stream itself
(``--follow_updates=false``: the external follower, tools/tfserving_follower.py,
is then the one writer); they take the export's update lock and are counted
as applied updates.  Predict answers every output tensor of the export (every
task's, as REST does). The tensors' declared sizes are checked before any is
built (request_limits.py); a message over --max_request_bytes is refused by
gRPC itself.
"""
import concurrent.futures
import contextlib
import time
from typing import Optional

import grpc
import numpy as np
from google.protobuf.message import DecodeError
from tensorflow_serving.apis import get_model_metadata_pb2, predict_pb2, prediction_service_pb2_grpc

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.export.layout import SERVING_SIGNATURE, UPDATE_MESSAGE_SIGNATURE
from easyonline.serve.http_api import ServingState
from easyonline.serve.request_limits import BadRequest, TooManyRows, check_tensor_inputs
from easyonline.serve.update_admission import UpdateRefused, admit_messages, admit_tensors

tf = ensure_legacy_keras()


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    """Answers Predict and GetModelMetadata from a ServingState."""

    def __init__(self, state: ServingState):
        self.state = state

    def _check_spec(self, spec, context) -> None:
        if spec.name != self.state.model_name:
            self.state.count("not_found")
            context.abort(grpc.StatusCode.NOT_FOUND, f"no model {spec.name!r}; this server has "
                                                     f"{self.state.model_name!r}")
        if spec.HasField("version") and str(spec.version.value) != self.state.export.version:
            self.state.count("not_found")
            context.abort(grpc.StatusCode.NOT_FOUND, f"version {spec.version.value} of {spec.name} is not served "
                                                     f"(version {self.state.export.version} is)")

    def _fill_spec(self, spec) -> None:
        spec.name = self.state.model_name
        spec.version.value = int(self.state.export.version)

    @contextlib.contextmanager
    def _refusals(self, context):
        """A refused request (too many rows, a bad input) as its gRPC status, counted as REST counts it."""
        try:
            yield
        except TooManyRows as e:
            self.state.count("too_large")
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
        except BadRequest as e:
            self.state.count("bad_request")
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))

    def Predict(self, request, context):  # pylint: disable=invalid-name
        started = time.perf_counter()
        self._check_spec(request.model_spec, context)
        signature = request.model_spec.signature_name
        if signature not in ("", SERVING_SIGNATURE):
            return self._update(request, signature, context)
        with self._refusals(context):  # the declared sizes, before make_ndarray fills them ([2**31] with one value)
            check_tensor_inputs(request.inputs, self.state.max_rows_per_request, self.state.export.inputs,
                                optional=self.state.export.input_defaults)
        try:
            inputs = {name: tf.make_ndarray(proto).reshape(-1).tolist() for name, proto in request.inputs.items()}
        except (TypeError, ValueError) as e:
            self.state.count("bad_request")
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"an input is not a valid TensorProto: {e}")
        with self._refusals(context):
            rows = self.state.predict_rows(request.model_spec.signature_name, inputs)
        try:
            outputs = self.state.export.predict(inputs)
        except ValueError as e:
            self.state.count("bad_request")
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        response = predict_pb2.PredictResponse()
        self._fill_spec(response.model_spec)
        response.model_spec.signature_name = SERVING_SIGNATURE
        for name, value in outputs.items():
            response.outputs[name].CopyFrom(tf.make_tensor_proto(value))
        self.state.count("ok", rows, time.perf_counter() - started)
        return response

    def _update(self, request, signature: str, context):
        """An update signature, run as TF Serving runs any signature (inputs and outputs by name), under the
        export's update lock, and counted as the server's own follower counts what it applies."""
        signatures = self.state.export.signature_defs()
        if signature not in signatures:  # TF Serving's answer (FAILED_PRECONDITION), with the names there are
            self.state.count("bad_request")
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f'Serving signature name: "{signature}" not found in signature def (this model has '
                          f'{sorted(signatures)})')
        if self.state.follows_updates:
            self.state.count("bad_request")
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"signature {signature!r} applies updates, and this server follows the update stream "
                          "itself: a second writer would interleave with it out of order. Start it with "
                          "--follow_updates=false to apply updates over gRPC only")
        state = self.state
        expected = signatures[signature].inputs
        try:  # each value the request declares it holds: nothing built is larger than what was received
            check_tensor_inputs(request.inputs, max(state.max_request_bytes // 4, 1), expected, exact=True,
                                limit="--max_request_bytes / 4 values per input")
        except BadRequest as e:
            self._refuse_update(context, UpdateRefused("too_large", f"signature {signature!r}: {e}"))
        wrong = sorted(name for name, proto in request.inputs.items() if proto.dtype != expected[name].dtype)
        if wrong:
            self.state.count("bad_request")
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"signature {signature!r}: input(s) {wrong} have "
                                                            "another dtype than the signature's (metadata lists them)")
        headers: list = []
        dropped: list = []
        try:
            inputs = {name: tf.make_ndarray(proto) for name, proto in request.inputs.items()}
            if signature == UPDATE_MESSAGE_SIGNATURE:  # (an empty batch applies nothing: no secret needed)
                messages = list(inputs["messages"].reshape(-1))
                if messages:
                    kept, headers, dropped = admit_messages(messages, state.verifier, state.allow_unsigned_updates,
                                                            state.follower.cursor, state.export.table_widths,
                                                            state.export.dense_shapes)
                    inputs["messages"] = np.array(kept, dtype=object)
            else:
                admit_tensors(inputs, state.verifier, state.allow_unsigned_updates,
                              {name: tf.as_dtype(spec.dtype) for name, spec in expected.items()})
            outputs = self.state.export.run_update_signature(signature, inputs)
            if dropped and not headers:  # only replays: the model holds them (TF Serving would say it applied them)
                outputs.update(last_sequence=np.int64(dropped[-1].sequence),
                               last_global_step=np.int64(dropped[-1].global_step))
        except UpdateRefused as e:
            self._refuse_update(context, e)
        except (TypeError, ValueError, DecodeError) as e:
            self.state.count("bad_request")
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e) or type(e).__name__)
        # an empty message batch applies nothing: a follower asking what the model holds (tools/served_state.py)
        self.state.follower.record_external(headers, None if headers or signature == UPDATE_MESSAGE_SIGNATURE else 1)
        self.state.count("update")
        response = predict_pb2.PredictResponse()
        self._fill_spec(response.model_spec)
        response.model_spec.signature_name = signature
        for name, value in outputs.items():
            response.outputs[name].CopyFrom(tf.make_tensor_proto(value))
        return response

    def _refuse_update(self, context, refused: UpdateRefused) -> None:
        """Counts (requests and refused updates by reason), logs, and answers the refusal; nothing was applied."""
        self.state.count("bad_request")
        self.state.follower.refuse_external(refused.reason, f"over gRPC: {refused}")
        code = grpc.StatusCode.PERMISSION_DENIED if refused.permission else grpc.StatusCode.INVALID_ARGUMENT
        if refused.reason in ("gap", "other_stream", "implausible_sequence"):
            code = grpc.StatusCode.FAILED_PRECONDITION  # the request may be fine, the server's state is not its start
        context.abort(code, str(refused))

    def GetModelMetadata(self, request, context):  # pylint: disable=invalid-name
        self._check_spec(request.model_spec, context)
        if list(request.metadata_field) != ["signature_def"]:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "metadata_field must be ['signature_def']")
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        self._fill_spec(response.model_spec)
        signatures = get_model_metadata_pb2.SignatureDefMap()
        for name, signature in self.state.export.signature_defs().items():
            signatures.signature_def[name].CopyFrom(signature)
        response.metadata["signature_def"].Pack(signatures)
        return response


def start_grpc_server(state: ServingState, host: str, port: int, threads: int = 8,
                      credentials: Optional[grpc.ServerCredentials] = None):
    """Starts the PredictionService (over TLS with ``credentials``, serve/tls.py); returns (server, the port it
    listens on: ``port`` or, for 0, a free one)."""
    # --max_request_bytes bounds a gRPC message as it does a REST body (gRPC answers RESOURCE_EXHAUSTED)
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="grpc"),
                         options=[("grpc.max_receive_message_length", state.max_request_bytes)])
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(PredictionService(state), server)
    bound = server.add_secure_port(f"{host}:{port}", credentials) if credentials is not None else \
        server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port} for gRPC")
    server.start()
    return server, bound
