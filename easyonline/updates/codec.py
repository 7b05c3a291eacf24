"""The UpdateMessage wire format (protos/easyonline/protos/update.proto): encode, split, decode.

A snapshot (dense values by id, sparse rows and deletes by table id) is cut
into messages no larger than ``max_bytes``: tables and even single dense
parameters are sliced, so any model fits under any topic's limit. Each
message carries the full header, so it can be applied on its own.

A full sync (or a base save) of large tables is not built whole: ``encode_stream``
takes its content piece by piece (``DensePiece``, ``RowsPiece``, ``DeletesPiece``,
a table's rows a chunk at a time) and yields each message as soon as it is
full. It holds at most the message being filled and the one being serialized;
its messages have ``parts = 0`` (the count is not known in advance), and the
last one has ``full_sync_end``.
"""
import dataclasses
from typing import Dict, Iterable, Iterator, List, Tuple, Union

import numpy as np
from google.protobuf.message import DecodeError

from easyonline.protos import update_pb2

FORMAT_VERSION = 1
_HEADER_RESERVE = 512   # header (model name, positions map) and framing, generously
_ENTRY_OVERHEAD = 64    # field tags and lengths of one entry


class MalformedUpdateError(ValueError):
    """A message that cannot be applied; the text says why."""


@dataclasses.dataclass
class UpdateSnapshot:
    """Parameters read at one point of training, ready to encode."""
    step: int
    create_time: float
    positions: Dict[int, int]
    dense: Dict[int, np.ndarray] = dataclasses.field(default_factory=dict)
    rows: Dict[int, Tuple[np.ndarray, np.ndarray]] = dataclasses.field(default_factory=dict)  # id -> (keys, values)
    deletes: Dict[int, np.ndarray] = dataclasses.field(default_factory=dict)
    full_sync: bool = False

    @property
    def empty(self) -> bool:
        return not self.dense and not any(len(k) for k, _ in self.rows.values()) and \
            not any(len(k) for k in self.deletes.values())

    def counts(self) -> Dict[str, int]:
        return {"dense": len(self.dense), "rows": sum(len(k) for k, _ in self.rows.values()),
                "deletes": sum(len(k) for k in self.deletes.values())}


class _Packer:
    """Fills messages up to a byte budget, slicing arrays where they do not fit."""

    def __init__(self, max_bytes: int):
        if max_bytes < 4 * _HEADER_RESERVE:
            raise ValueError(f"max_bytes={max_bytes} is too small for update messages")
        self.budget = max_bytes - _HEADER_RESERVE
        self.messages: List[update_pb2.UpdateMessage] = []
        self._used = self.budget  # forces a first message

    def _room(self, item_bytes: int) -> int:
        """How many items of ``item_bytes`` fit in the current message (opening a new one if none)."""
        fit = (self.budget - self._used - _ENTRY_OVERHEAD) // item_bytes
        if fit < 1:
            self.messages.append(update_pb2.UpdateMessage())
            self._used = 0
            fit = (self.budget - _ENTRY_OVERHEAD) // item_bytes
            if fit < 1:
                raise ValueError(f"an item of {item_bytes} bytes does not fit in a message of "
                                 f"{self.budget + _HEADER_RESERVE} bytes: raise max_message_bytes")
        return fit

    def add_dense(self, param_id: int, value: np.ndarray) -> None:
        flat = np.ascontiguousarray(value, np.float32).reshape(-1)
        start = 0
        while True:  # at least one entry, so an empty parameter still arrives
            n = min(self._room(4), len(flat) - start)
            self.messages[-1].dense.add(id=param_id, shape=list(value.shape), offset=start,
                                        values=flat[start:start + n].tobytes())
            self._used += _ENTRY_OVERHEAD + 4 * n
            start += n
            if start >= len(flat):
                return

    def add_rows(self, table_id: int, keys: np.ndarray, values: np.ndarray) -> None:
        dim = values.shape[1]
        keys = np.ascontiguousarray(keys, np.int64)
        values = np.ascontiguousarray(values, np.float32)
        start = 0
        while start < len(keys):
            n = min(self._room(8 + 4 * dim), len(keys) - start)
            self.messages[-1].sparse.add(table_id=table_id, dim=dim, keys=keys[start:start + n].tobytes(),
                                         values=values[start:start + n].tobytes())
            self._used += _ENTRY_OVERHEAD + n * (8 + 4 * dim)
            start += n

    def take_closed(self) -> List[update_pb2.UpdateMessage]:
        """The messages already full (every one but the one being filled), removed from the packer."""
        closed, self.messages = self.messages[:-1], self.messages[-1:]
        return closed

    def add_deletes(self, table_id: int, dim: int, keys: np.ndarray) -> None:
        keys = np.ascontiguousarray(keys, np.int64)
        start = 0
        while start < len(keys):
            n = min(self._room(8), len(keys) - start)
            self.messages[-1].sparse.add(table_id=table_id, dim=dim, deleted_keys=keys[start:start + n].tobytes())
            self._used += _ENTRY_OVERHEAD + 8 * n
            start += n


def encode_update(snapshot: UpdateSnapshot, model_name: str, first_sequence: int, update_id: int,
                  max_bytes: int, table_dims: Dict[int, int], stream_id: int = 0) -> List[bytes]:
    """The snapshot as serialized messages, each <= max_bytes, numbered from ``first_sequence`` on ``stream_id``."""
    packer = _Packer(max_bytes)
    # Deletes first: a reader applying part by part never deletes a row this update re-sends.
    for table_id, keys in sorted(snapshot.deletes.items()):
        packer.add_deletes(table_id, table_dims[table_id], keys)
    for param_id, value in sorted(snapshot.dense.items()):
        packer.add_dense(param_id, value)
    for table_id, (keys, values) in sorted(snapshot.rows.items()):
        packer.add_rows(table_id, keys, values)
    messages = packer.messages
    head = StreamHeader(model_name, snapshot.step, snapshot.create_time, snapshot.positions, update_id,
                        snapshot.full_sync, stream_id)
    return [_finish(message, head, first_sequence + part, part, len(messages), max_bytes,
                    end=snapshot.full_sync and part == len(messages) - 1)
            for part, message in enumerate(messages)]


@dataclasses.dataclass
class StreamHeader:
    """What every message of one update carries in its header besides its number."""
    model_name: str
    step: int
    create_time: float
    positions: Dict[int, int]
    update_id: int
    full_sync: bool
    stream_id: int = 0


def _finish(message: update_pb2.UpdateMessage, head: StreamHeader, sequence: int, part: int, parts: int,
            max_bytes: int, end: bool = False) -> bytes:
    header = message.header
    header.model_name = head.model_name
    header.format_version = FORMAT_VERSION
    header.global_step = head.step
    header.sequence = sequence
    header.create_time = head.create_time
    for partition, offset in head.positions.items():
        header.positions[int(partition)] = int(offset)
    header.update_id = head.update_id
    header.part = part
    header.parts = parts
    header.full_sync = head.full_sync
    header.full_sync_end = end
    header.stream_id = head.stream_id
    # deterministic (map entries in key order): a reader that parses and re-serializes a message (the TF Serving
    # follower) gets these bytes back, so a signature (updates/signing.py) made over them still verifies
    data = message.SerializeToString(deterministic=True)
    if len(data) > max_bytes:  # the reserve is generous; this guards a too-long model name or positions map
        raise ValueError(f"update message of {len(data)} bytes exceeds max_message_bytes={max_bytes}")
    return data


@dataclasses.dataclass
class DensePiece:
    param_id: int
    value: np.ndarray


@dataclasses.dataclass
class RowsPiece:
    table_id: int
    keys: np.ndarray
    values: np.ndarray


@dataclasses.dataclass
class DeletesPiece:
    table_id: int
    dim: int
    keys: np.ndarray


Piece = Union[DensePiece, RowsPiece, DeletesPiece]


def encode_stream(pieces: Iterable[Piece], head: StreamHeader, first_sequence: int,
                  max_bytes: int) -> Iterator[bytes]:
    """A full sync as serialized messages, each yielded as soon as it is full (see the module docstring).

    Pieces are packed in the order given (a reader applies messages in order, so a table's deletes must
    not follow rows of the same keys). Each message is <= max_bytes, numbered from ``first_sequence``,
    ``parts = 0``; the last has ``full_sync_end``. No piece: no message.
    """
    if not head.full_sync:
        raise ValueError("encode_stream writes full syncs only (parts = 0 is valid only there)")
    packer = _Packer(max_bytes)
    part = 0
    for piece in pieces:
        if isinstance(piece, DensePiece):
            packer.add_dense(piece.param_id, piece.value)
        elif isinstance(piece, RowsPiece):
            packer.add_rows(piece.table_id, piece.keys, piece.values)
        else:
            packer.add_deletes(piece.table_id, piece.dim, piece.keys)
        for message in packer.take_closed():
            yield _finish(message, head, first_sequence + part, part, 0, max_bytes)
            part += 1
    for message in packer.messages:  # the last one, when there was anything
        yield _finish(message, head, first_sequence + part, part, 0, max_bytes, end=True)


def decode_update(data: bytes) -> update_pb2.UpdateMessage:
    """Parses and checks one message; raises MalformedUpdateError naming what is wrong."""
    if not data:
        raise MalformedUpdateError("empty message")
    message = update_pb2.UpdateMessage()
    try:
        message.ParseFromString(data)
    except (DecodeError, ValueError) as e:
        raise MalformedUpdateError(f"not an UpdateMessage ({e})") from None
    header = message.header
    if header.format_version != FORMAT_VERSION:
        raise MalformedUpdateError(f"format_version {header.format_version}, this reader knows {FORMAT_VERSION}")
    if header.sequence < 1 or not header.model_name:
        raise MalformedUpdateError("header lacks a sequence number or model name")
    if header.parts == 0 and not header.full_sync:
        raise MalformedUpdateError("parts = 0 (a count not known in advance) is valid only in a full sync")
    if header.parts and header.part >= header.parts:
        raise MalformedUpdateError(f"part {header.part} of {header.parts}")
    if header.full_sync_end and not header.full_sync:
        raise MalformedUpdateError("full_sync_end on a message that is not part of a full sync")
    for entry in message.dense:
        size = int(np.prod(entry.shape)) if len(entry.shape) else 1
        if len(entry.values) % 4 or entry.offset + len(entry.values) // 4 > size:
            raise MalformedUpdateError(f"dense id {entry.id}: {len(entry.values)} value bytes at offset "
                                       f"{entry.offset} do not fit shape {list(entry.shape)}")
    for entry in message.sparse:
        if entry.dim < 1 or len(entry.keys) % 8 or len(entry.deleted_keys) % 8 or \
                len(entry.values) != len(entry.keys) // 8 * entry.dim * 4:
            raise MalformedUpdateError(f"table id {entry.table_id}: {len(entry.keys)} key bytes, "
                                       f"{len(entry.values)} value bytes and dim {entry.dim} are inconsistent")
    return message


def dense_slice(entry: update_pb2.DenseEntry) -> np.ndarray:
    return np.frombuffer(entry.values, "<f4")


def sparse_arrays(entry: update_pb2.SparseEntry) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(deleted keys, keys, values [n, dim]) of one entry."""
    keys = np.frombuffer(entry.keys, "<i8")
    return (np.frombuffer(entry.deleted_keys, "<i8"), keys,
            np.frombuffer(entry.values, "<f4").reshape(len(keys), entry.dim))


def describe(message: update_pb2.UpdateMessage, sample_keys: int = 0) -> Dict:
    """A JSON-friendly summary (for logs and read_updates)."""
    header = message.header
    summary = {"stream": header.stream_id, "sequence": header.sequence, "step": header.global_step, "update": header.update_id,
               "part": f"{header.part + 1}/{header.parts or '?'}", "model": header.model_name,
               "created": round(header.create_time, 3), "positions": dict(header.positions),
               "dense": len(message.dense), "rows": {}, "deletes": {}}
    if header.full_sync:
        summary["full_sync"] = True
    if header.full_sync_end:
        summary["full_sync_end"] = True
    for entry in message.sparse:
        deleted, keys, _ = sparse_arrays(entry)
        if len(keys):
            summary["rows"][entry.table_id] = summary["rows"].get(entry.table_id, 0) + len(keys)
            if sample_keys:
                summary.setdefault("sample_keys", {})[entry.table_id] = keys[:sample_keys].tolist()
        if len(deleted):
            summary["deletes"][entry.table_id] = summary["deletes"].get(entry.table_id, 0) + len(deleted)
    return summary
