"""What an update over gRPC must pass before the export's update signature runs.

The stream path (update_follower.py) checks every message: its MAC when the
server has the trainer's secret, that it decodes, its model, its place in the
stream, and that every value fits the export and is finite. An update
signature called over gRPC used to skip all of that, so one request could
write a NaN into every prediction or rows of anyone's making. Here the same
rules run on the request, before anything is applied:

- who: with a secret, every message's MAC (incr_update_message_sig) or the
  request's ``mac`` input (incr_update_sig, which a signed export declares);
  without one the server refuses updates over gRPC unless it was started with
  ``--allow_unsigned_updates``;
- what: each message decodes, names this model, and follows the stream
  (duplicates already applied are dropped from the batch: a replay would
  write older values; a gap or another stream refuses the request); every
  value fits the export and is finite.

A refusal is an ``UpdateRefused`` with the reason serve counts it under
(``easyonline_serving_refused_updates_total``) and nothing applied.
"""
from typing import Dict, List, Optional, Tuple

import numpy as np

from easyonline.protos import update_pb2
from easyonline.updates.apply_rules import DUPLICATE, NEXT, OTHER_MODEL, StreamCursor, message_changes
from easyonline.updates.codec import MalformedUpdateError, decode_update
from easyonline.updates.signing import MAC_INPUT, UNSIGNED, UpdateSignatureError, UpdateVerifier, update_inputs_mac


class UpdateRefused(ValueError):
    """An update request refused before anything was applied; ``reason`` is how serve counts it."""

    def __init__(self, reason: str, text: str, permission: bool = False):
        super().__init__(text)
        self.reason = reason
        self.permission = permission  # who sent it, not what it holds (gRPC PERMISSION_DENIED)


NO_SECRET = ("this server was not given the trainer's update secret (--update_secret_file, or the environment "
             "variable train_config.incr_save_config.signing_secret names): it applies no update over gRPC. Give it "
             "the secret, or start it with --allow_unsigned_updates where nobody else reaches this port")


def admit_messages(messages: List[bytes], verifier: Optional[UpdateVerifier], allow_unsigned: bool,
                   cursor: StreamCursor, table_widths: Dict[int, int], dense_shapes: Dict[int, List[int]]
                   ) -> Tuple[List[bytes], List[update_pb2.UpdateHeader], List[update_pb2.UpdateHeader]]:
    """The messages to apply (as received, duplicates dropped), their headers, and the headers of the duplicates
    dropped; raises UpdateRefused."""
    if verifier is None and not allow_unsigned:
        raise UpdateRefused(UNSIGNED, NO_SECRET, permission=True)
    try:
        bodies = verifier.verify_all(messages) if verifier is not None else list(messages)
    except UpdateSignatureError as e:
        raise UpdateRefused(e.reason, str(e), permission=True) from None
    probe = StreamCursor(cursor.model_name, cursor.next_sequence, cursor.stream_id)
    kept, headers, dropped = [], [], []
    for i, (data, body) in enumerate(zip(messages, bodies)):
        try:
            message = decode_update(body)
        except MalformedUpdateError as e:
            raise UpdateRefused("malformed", f"update message {i}: {e}") from None
        header = message.header
        verdict = probe.verdict(header)
        if verdict == DUPLICATE:
            dropped.append(header)
            continue
        if verdict == OTHER_MODEL:
            raise UpdateRefused("inconsistent", f"update message {i} is of model {header.model_name!r}; this "
                                                f"server serves {cursor.model_name!r}")
        if verdict != NEXT:
            raise UpdateRefused(verdict, f"update message {i}: expected sequence {probe.next_sequence} of stream "
                                         f"{probe.stream_id}, got {header.sequence} of stream {header.stream_id}")
        try:
            message_changes(message, table_widths, dense_shapes)  # fits the export, every value finite
        except ValueError as e:
            raise UpdateRefused("inconsistent", f"update message {i} (sequence {header.sequence}): {e}") from None
        probe.advance(header)
        kept.append(data)
        headers.append(header)
    return kept, headers, dropped


def admit_tensors(inputs: Dict[str, np.ndarray], verifier: Optional[UpdateVerifier], allow_unsigned: bool,
                  dtypes: Dict[str, object]) -> None:
    """incr_update_sig's decoded inputs: the MAC (a signed export declares the ``mac`` input) and finite values;
    raises UpdateRefused."""
    if verifier is not None:
        if MAC_INPUT not in inputs:
            raise UpdateRefused(UNSIGNED, "this export's incr_update_sig takes no MAC (exported with "
                                          "--update_signatures=unsigned), and this server verifies updates: "
                                          "use incr_update_message_sig, or a signed export", permission=True)
        expected = update_inputs_mac(inputs, verifier.key, dtypes)  # type: ignore[arg-type]
        if int(np.asarray(inputs[MAC_INPUT]).reshape(-1)[0]) != expected:
            raise UpdateRefused("signature", "incr_update_sig: the mac input is not the MAC of these inputs under "
                                             "this server's secret: refused, nothing applied", permission=True)
    elif not allow_unsigned:
        raise UpdateRefused(UNSIGNED, NO_SECRET, permission=True)
    for name, value in sorted(inputs.items()):
        if np.issubdtype(np.asarray(value).dtype, np.floating) and not np.isfinite(value).all():
            raise UpdateRefused("inconsistent", f"incr_update_sig: input {name!r} holds NaN or infinite values")
