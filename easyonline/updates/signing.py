"""Update messages a server can verify came from its trainer: a keyed MAC at the end of every message.

Whoever reaches a server's update path (the gRPC update signatures, an update
topic without ACLs) could otherwise overwrite or delete its rows. The trainer
and its servers share a secret (``incr_save_config.signing_secret``); the MAC
is SipHash-2-4 keyed by the first 16 bytes of SHA-256(secret), reduced modulo
2**63 - 1, exactly what TensorFlow's core op StringToHashBucketStrong
(``tf.strings.to_hash_bucket_strong``) computes. So the same check runs in
serve (Python) and inside a stock-serving export's update signatures, where
only core ops exist (export/serving_module.py).

Wire form: the serialized UpdateMessage (the body) followed by field 15
(``mac``, fixed64): the tag byte 0x79 and 8 little-endian bytes. Every reader
parses a signed message as the same UpdateMessage; a verifier splits off the
last 9 bytes and hashes the rest, re-serializing nothing.

``update_inputs_mac`` signs incr_update_sig's decoded tensors the same way
(the inputs serialized with ``tf.io.serialize_tensor`` in name order), for a
processor that decodes messages itself and holds the secret.
"""
import hashlib
import os
import struct
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from easyonline.config.secrets import resolve_env
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.errors import ConfigError
from easyonline.protos import pipeline_pb2

tf = ensure_legacy_keras()

MAC_BUCKETS = 2 ** 63 - 1  # the op's num_buckets: a 63-bit MAC
MAC_TAG = bytes([15 << 3 | 1])  # UpdateMessage.mac: field 15, wire type 1 (fixed64)
TRAILER_BYTES = 9
MAC_INPUT = "mac"  # incr_update_sig's extra input in a signed export

UNSIGNED = "unsigned"  # refusal reasons, as serve counts them
BAD_SIGNATURE = "signature"


class UpdateSignatureError(ValueError):
    """A message without a MAC, or whose MAC this secret did not make; ``reason`` is UNSIGNED or BAD_SIGNATURE."""

    def __init__(self, reason: str, text: str):
        super().__init__(text)
        self.reason = reason


def siphash_key(secret: str) -> Tuple[int, int]:
    """The 128-bit SipHash key for ``secret``, as the two signed 64-bit ints the op's ``key`` attribute takes."""
    if not secret:
        raise ValueError("an update signing secret must not be empty")
    k0, k1 = struct.unpack("<qq", hashlib.sha256(secret.encode("utf-8")).digest()[:16])
    return k0, k1


def macs(bodies: Sequence[bytes], key: Tuple[int, int]) -> np.ndarray:
    """The MAC of each body (int64, non-negative)."""
    if not bodies:
        return np.zeros(0, np.int64)
    return tf.strings.to_hash_bucket_strong(tf.constant(list(bodies), tf.string), MAC_BUCKETS, list(key)).numpy()


SECRET_FIELD = "train_config.incr_save_config.signing_secret"


def signing_secret(incr: pipeline_pb2.IncrSaveConfig) -> str:
    """The configured secret (a ``${NAME}`` read from the environment; ConfigError if unset), "" for none."""
    return resolve_env(incr.signing_secret, SECRET_FIELD) if incr.signing_secret else ""


def server_secret(incr: pipeline_pb2.IncrSaveConfig, secret_file: str = "") -> str:
    """The secret a server verifies updates with: ``secret_file``'s content, else the export's config value when
    it is a ``${NAME}`` set in this environment; "" when the trainer signs nothing. Raises ConfigError when the
    trainer signs (the config has a secret, redacted or a reference) and this server was not given it."""
    if secret_file:
        try:
            with open(secret_file, encoding="utf-8") as f:
                secret = f.read().strip()
        except OSError as e:
            raise ConfigError("--update_secret_file", f"cannot read {secret_file}: {e.strerror}") from None
        if not secret:
            raise ConfigError("--update_secret_file", f"{secret_file} is empty")
        return secret
    value = incr.signing_secret
    if not value:
        return ""
    reference = value.startswith("${")
    if reference and value[2:-1] in os.environ:
        return resolve_env(value, SECRET_FIELD)
    raise ConfigError(SECRET_FIELD, "the trainer signs its updates, and this server was not given the secret: "
                      + (f"set the environment variable {value[2:-1]} or " if reference else "")
                      + "pass --update_secret_file")


def signer(incr: pipeline_pb2.IncrSaveConfig) -> Optional["UpdateSigner"]:
    """The publisher's signer for this config, None when it signs nothing."""
    secret = signing_secret(incr)
    return UpdateSigner(secret) if secret else None


class UpdateSigner:
    """Appends the MAC to serialized messages (the publisher, just before sending)."""

    def __init__(self, secret: str):
        self.key = siphash_key(secret)

    def sign(self, messages: List[bytes]) -> List[bytes]:
        return [body + MAC_TAG + struct.pack("<q", int(mac)) for body, mac in zip(messages, macs(messages, self.key))]


class UpdateVerifier:
    """Checks a message's MAC before anything reads it; ``verify`` returns the body (the message without it)."""

    def __init__(self, secret: str):
        self.key = siphash_key(secret)

    def verify(self, data: bytes) -> bytes:
        return self.verify_all([data])[0]

    def verify_all(self, messages: Sequence[bytes]) -> List[bytes]:
        """The bodies of ``messages``; raises UpdateSignatureError naming the first one that fails."""
        bodies = []
        for i, data in enumerate(messages):
            if len(data) < TRAILER_BYTES or data[-TRAILER_BYTES:-8] != MAC_TAG:
                raise UpdateSignatureError(UNSIGNED, f"update message {i} carries no signature (MAC): its trainer "
                                                     "has no incr_save_config.signing_secret, or it is not a trainer")
            bodies.append(bytes(data[:-TRAILER_BYTES]))
        expected = macs(bodies, self.key)
        for i, data in enumerate(messages):
            if struct.unpack("<q", data[-8:])[0] != int(expected[i]):
                raise UpdateSignatureError(BAD_SIGNATURE, f"update message {i}: its signature (MAC) was not made "
                                                          "with this server's secret: refused, nothing applied")
        return bodies


def update_inputs_payload(inputs: Dict[str, Any]) -> Any:
    """What incr_update_sig's MAC covers: every input but the MAC, serialized, in name order (graph or eager)."""
    return tf.strings.reduce_join([tf.io.serialize_tensor(inputs[name]) for name in sorted(inputs)
                                   if name != MAC_INPUT])


def update_inputs_mac(inputs: Dict[str, np.ndarray], key: Tuple[int, int], dtypes: Optional[Dict[str, Any]] = None
                      ) -> int:
    """The ``mac`` input of a signed export's incr_update_sig for these inputs (``dtypes``: each input's, as the
    signature declares them; default: as numpy has them)."""
    tensors = {name: tf.constant(value, (dtypes or {}).get(name)) for name, value in inputs.items()
               if name != MAC_INPUT}
    payload = update_inputs_payload(tensors)
    return int(tf.strings.to_hash_bucket_strong(tf.reshape(payload, [1]), MAC_BUCKETS, list(key)).numpy()[0])


def verified_messages(messages: Any, key: Tuple[int, int]) -> Tuple[Any, Any]:
    """In a graph: (the messages' bodies, an op that fails naming the first message whose MAC is missing or
    wrong). Core ops only, for a stock-serving export's incr_update_message_sig."""
    length = tf.strings.length(messages)
    padded = tf.strings.join([tf.fill(tf.shape(messages), "\0" * TRAILER_BYTES), messages])  # no substr past 0
    every = tf.ones_like(length)  # substr takes a position and a length per string, of its shape
    tail = tf.strings.substr(padded, length, TRAILER_BYTES * every)  # the last 9 bytes
    bodies = tf.strings.substr(messages, 0 * every, tf.maximum(length - TRAILER_BYTES, 0))
    carried = tf.reshape(tf.io.decode_raw(tf.strings.substr(tail, every, 8 * every), tf.int64, little_endian=True),
                         [-1])
    expected = tf.strings.to_hash_bucket_strong(bodies, MAC_BUCKETS, list(key))
    ok = (length >= TRAILER_BYTES) & tf.equal(tf.strings.substr(tail, 0 * every, every), MAC_TAG) & tf.equal(carried, expected)
    first_bad = tf.argmin(tf.concat([tf.cast(ok, tf.int32), [0]], 0), output_type=tf.int32)  # (no message: 0)
    check = tf.debugging.Assert(tf.reduce_all(ok), [
        "update message", first_bad, "is unsigned or not signed with this model's secret "
        "(incr_save_config.signing_secret): refused, nothing applied"], name="verify_update_macs")
    return bodies, check


def verified_inputs(inputs: Dict[str, Any], key: Tuple[int, int]) -> Any:
    """In a graph: an op that fails unless ``inputs[MAC_INPUT]`` is the MAC of the other inputs."""
    payload = tf.reshape(update_inputs_payload(inputs), [1])
    expected = tf.strings.to_hash_bucket_strong(payload, MAC_BUCKETS, list(key))[0]
    return tf.debugging.Assert(tf.equal(tf.reshape(inputs[MAC_INPUT], []), expected), [
        "incr_update_sig: the mac input is not the MAC of these inputs under this model's secret "
        "(incr_save_config.signing_secret): refused, nothing applied"], name="verify_update_inputs_mac")
