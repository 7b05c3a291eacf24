"""What a TF Serving server holds, asked before tools/tfserving_follower.py sends it updates.

TF Serving loads a newer export version on its own, and a restarted server
reloads its export and so loses every update it was sent; neither breaks a
call the follower makes. Both must be known *before* a batch is sent: a
batch older than a newly loaded version's export would regress its rows
(and could delete rows re-created since), and after a restart the messages
since the export must be sent again. Conversely, a connection that merely
dropped (a proxy's GOAWAY, a max connection age) lost nothing, and replaying
the stream from the export then only regresses rows for a while.

The question is a Predict of ``incr_update_message_sig`` with no messages,
without a version: TF Serving answers from the version it serves to
unversioned requests (its ``model_spec.version``), and the signature's
``previous_sequence`` output says the last sequence the model applied since it
was loaded (-1: none, a freshly loaded export; exports made before that
output existed do not say). The stand-in, ``serve --follow_updates=false
--grpc_port``, answers the same way.
"""
import dataclasses
from typing import Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.export.layout import UPDATE_MESSAGE_SIGNATURE

tf = ensure_legacy_keras()
from tensorflow_serving.apis import predict_pb2  # noqa: E402  pylint: disable=g-import-not-at-top

HELD_OUTPUT = "previous_sequence"  # the update signature's output: the last sequence applied before the call
NOTHING_HELD = -1  # what a (re)loaded export holds

# judge()'s verdicts
SAME = "same"  # the version fed, holding what this follower had acknowledged (or nothing to compare yet)
OTHER_VERSION = "other_version"  # the server serves another version: follow it from its export's position
LOST = "lost"  # the server holds none of what it acknowledged: it reloaded its export (restarted)
OTHER_WRITER = "other_writer"  # it holds a sequence this follower did not leave it at
UNKNOWN = "unknown"  # the export does not say what it holds (made before previous_sequence existed)


@dataclasses.dataclass(frozen=True)
class Served:
    version: str  # the version answering unversioned requests ("" if the answer names none)
    held: Optional[int]  # the last sequence it applied since loading (-1: none); None: the export does not say


def ask(stub, model_name: str, timeout: float) -> Served:
    """One empty update call (applies nothing); grpc.RpcError as the server answers it."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = UPDATE_MESSAGE_SIGNATURE
    request.inputs["messages"].CopyFrom(tf.make_tensor_proto([], dtype=tf.string, shape=[0]))
    response = stub.Predict(request, timeout=timeout)
    version = str(response.model_spec.version.value) if response.model_spec.HasField("version") else ""
    held = int(tf.make_ndarray(response.outputs[HELD_OUTPUT])) if HELD_OUTPUT in response.outputs else None
    return Served(version, held)


def judge(served: Served, version: str, acknowledged: Optional[int]) -> str:
    """How ``served`` compares with what the follower fed: ``version``, acknowledged up to ``acknowledged``
    (None: nothing since it (re)started from the export, so anything the server holds is as expected)."""
    if served.version and served.version != version:
        return OTHER_VERSION
    if served.held is None:
        return UNKNOWN
    if acknowledged is None or served.held == acknowledged:
        return SAME
    if served.held == NOTHING_HELD:
        return LOST
    return OTHER_WRITER
