"""The background sender: reads changed rows, encodes, sends, retries; never blocks training.

The training thread hands over a ``PublishJob`` (dense values it copied, and
the id arrays the ChangeTracker collected) through a bounded queue. This
thread deduplicates the keys, reads their current rows, encodes and sends.
When the queue is full (the sink is slow or down) the trainer does not
queue more copies: it keeps recording into the tracker, whose keys merge
into the next job. A failed send is retried with the same sequence numbers
until it succeeds, so the stream has no gaps and no reordering.

Where the numbering continues is kept in model_dir (``StreamPosition``),
never rediscovered from the sink: after a clean stop at the next sequence,
after a crash above the numbers the crashed run had reserved. When the
readers' rows may differ from the restored checkpoint (a crash, a stop
before the last publish got out, a new stream for a restored model), the
thread asks for a full sync: every row is sent once more. A full sync is
streamed (``_stream_full_sync``): one table shard read at a time, its
messages sent in batches of about ``full_sync_send_bytes`` as they are
encoded, so its memory does not grow with the model. Rows and dense
parameters with NaN or infinite values are never published (``guard``).
"""
import collections
import dataclasses
import logging
import queue
import threading
import time
from typing import Deque, Dict, List, Optional, Tuple, Union

import numpy as np

from easyonline.core.errors import error_text
from easyonline.core.lease import ModelDirLease
from easyonline.publish.nonfinite import NonFiniteGuard
from easyonline.publish.snapshot import TableRows, full_sync_pieces, take_snapshot
from easyonline.publish.stream_position import StreamPosition
from easyonline.updates.codec import StreamHeader, UpdateSnapshot, encode_stream, encode_update
from easyonline.updates.param_ids import ParameterIds
from easyonline.updates.signing import UpdateSigner

log = logging.getLogger(__name__)


@dataclasses.dataclass
class PublishJob:
    step: int
    create_time: float
    positions: Dict[int, int]
    dense: Optional[Dict[int, np.ndarray]]      # None: this update carries no dense parameters
    trained: Dict[str, List[np.ndarray]]
    deleted: Dict[str, List[np.ndarray]]
    full_sync: bool = False


@dataclasses.dataclass
class PublishResult:
    """One update on the stream: what ``on_publish`` callbacks receive."""
    first_sequence: int
    last_sequence: int
    step: int
    create_time: float
    acked_time: float
    bytes: int
    dense: int
    rows: int
    deletes: int
    full_sync: bool


_STOP = object()
FULL_SYNC_SEND_BYTES = 16 << 20


class _GaveUp(Exception):
    """Sending failed until the stop deadline."""


class _LeaseLost(Exception):
    """Another trainer took model_dir over: this one sends nothing more."""


class UpdatePublisher:
    """Owns the sender thread; the trainer calls ``has_room``/``offer``, ``take_full_sync`` and ``close``."""

    def __init__(self, sink, model_name: str, ids: ParameterIds, tables: TableRows, max_message_bytes: int,
                 model_dir: str, max_pending: int = 4, full_sync_send_bytes: int = FULL_SYNC_SEND_BYTES,
                 signer: Optional[UpdateSigner] = None):
        """``signer``: appends each message's MAC before it is sent (updates/signing.py); None: unsigned."""
        if full_sync_send_bytes < 1:
            raise ValueError(f"full_sync_send_bytes={full_sync_send_bytes} must be positive")
        self.sink = sink
        self.signer = signer
        self.lease: Optional[ModelDirLease] = None  # model_dir's lease: asked before every send (core/lease.py)
        self.position = StreamPosition(model_dir, sink.target)
        self._stream_step: Optional[int] = None  # the step of the stream's last message, None: unknown
        self.model_name = model_name
        self._key = model_name.encode()
        self._ids = ids
        self._tables = tables
        self._max_bytes = max_message_bytes
        self._send_bytes = full_sync_send_bytes
        self.guard = NonFiniteGuard("published")
        self._queue: "queue.Queue" = queue.Queue(max_pending)
        self._results: Deque[PublishResult] = collections.deque()
        self._full_sync = threading.Event()
        self._deadline: Optional[float] = None
        self._thread: Optional[threading.Thread] = None
        self.next_sequence: Optional[int] = None
        self.stream_id = 0
        self.last_acked: Optional[PublishResult] = None
        self.error: Optional[str] = None
        self.error_since: Optional[float] = None
        self._next_error_log = 0.0
        self.unsent_jobs = 0
        self.bytes_sent = 0

    # --- the training thread's side -----------------------------------------------
    def start(self, restored_step: int) -> None:
        """Decides where the numbering continues (reads and writes model_dir's UPDATE_STREAM: raises what the
        store raises), so that a full sync, when due, is the first update; then connects in the background."""
        start = self.position.start(restored_step)
        self.next_sequence, self._update_id, self.stream_id = start.next_sequence, start.next_update_id, start.stream_id
        if start.full_sync:
            log.info("update stream %s (%s): the restored model at step %d may differ from what readers have, "
                     "re-sending every row once", start.stream_id, start.reason, restored_step)
            self._full_sync.set()
        else:
            self._stream_step = restored_step
        log.info("publishing updates to %s from sequence %d of stream %d (%s)", self.sink.description,
                 self.next_sequence, self.stream_id, start.reason)
        self._tables.lookup({})  # reads no row: builds the tables' lookup now (~0.3 s), not at the first update
        self._thread = threading.Thread(target=self._run, name="update-publisher", daemon=True)
        self._thread.start()

    def has_room(self) -> bool:
        return not self._queue.full()

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    def offer(self, job: Union[PublishJob, object], timeout: Optional[float] = None) -> bool:
        """Queues ``job``; without timeout never blocks (False when full)."""
        try:
            if timeout is None:
                self._queue.put_nowait(job)
            else:
                self._queue.put(job, timeout=max(timeout, 0))
            return True
        except queue.Full:
            return False

    def take_full_sync(self) -> bool:
        """True once when the thread found the stream out of step with the restored model."""
        if self._full_sync.is_set():
            self._full_sync.clear()
            return True
        return False

    def results(self) -> List[PublishResult]:
        """Updates acknowledged since the last call."""
        out = []
        while self._results:
            out.append(self._results.popleft())
        return out

    def close(self, timeout: float) -> bool:
        """Sends what is queued (up to ``timeout`` seconds) and stops; True when everything got out."""
        self._deadline = time.time() + timeout
        if self._thread is None:
            return True
        if not self.offer(_STOP, timeout=timeout):
            self.unsent_jobs += self._queue.qsize()
        self._thread.join(max(self._deadline - time.time(), 0) + 5)
        self.sink.close()
        leftover = self._queue.qsize()
        if self._thread.is_alive() or leftover:
            self.unsent_jobs += leftover
        clean = self.unsent_jobs == 0 and not self._thread.is_alive()
        if clean and self.next_sequence is not None and self._stream_step is not None:
            try:
                self.position.close(self.next_sequence - 1, self._update_id - 1, self._stream_step)
            except Exception as e:  # pylint: disable=broad-except
                log.error("could not record the update stream's end in %s (%s): the next start re-sends every row",
                          self.position.path, e)
        return clean

    # --- the sender thread ----------------------------------------------------------
    def _expired(self) -> bool:
        return self._deadline is not None and time.time() > self._deadline

    def _failed(self, what: str, error: Exception, backoff: float) -> float:
        message = f"{what} {self.sink.description} failed: {error_text(error)}"
        now = time.time()
        if self.error is None:
            self.error_since = now
        if now >= self._next_error_log:  # the first failure, then once a minute
            log.error("%s (for %.0f s); training goes on, retrying", message, now - (self.error_since or now))
            self._next_error_log = now + 60
        self.error = message
        self.sink.reset()
        time.sleep(backoff)
        return min(backoff * 2, 10.0)

    def _recovered(self) -> None:
        if self.error is not None:
            since = self.error_since or time.time()
            log.info("publishing to %s works again after %.0f s", self.sink.description, time.time() - since)
        self.error = self.error_since = None
        self._next_error_log = 0.0

    def _connect(self) -> bool:
        backoff = 0.5
        while not self._expired():
            try:
                self.sink.connect()
                self._recovered()
                return True
            except Exception as e:  # pylint: disable=broad-except
                backoff = self._failed("connecting to", e, backoff)
        return False

    def _run(self) -> None:
        if not self._connect():
            self.unsent_jobs += self._queue.qsize()
            return
        while True:
            job = self._queue.get()
            if job is _STOP:
                return
            try:
                if job.full_sync:
                    result = self._stream_full_sync(job)
                else:
                    result = self._publish(job)
            except _GaveUp as e:
                self.unsent_jobs += 1 + self._queue.qsize()
                log.error("gave up publishing at stop: %s", e)
                return
            except _LeaseLost as e:
                self.unsent_jobs += 1 + self._queue.qsize()
                self.error = f"stopped publishing: {e}"
                log.error("%s; nothing more is sent", self.error)
                return
            except Exception as e:  # pylint: disable=broad-except
                log.exception("reading an update failed (%s); a full sync follows", e)
                self._full_sync.set()
                continue
            self.guard.maybe_log()
            if result is None:
                continue
            self.bytes_sent += result.bytes
            self.last_acked = result
            self._results.append(result)

    def _send(self, numbered: List[Tuple[int, bytes]]) -> None:
        """Sends (sequence, message) pairs, retrying the same numbers until they are acknowledged."""
        if self.signer is not None:
            numbered = list(zip([n for n, _ in numbered], self.signer.sign([m for _, m in numbered])))
        backoff = 0.5
        while True:
            self._wait_for_lease()
            try:
                self.position.reserve(numbered[-1][0])
                self.sink.send(numbered, self._key)
                break
            except Exception as e:  # pylint: disable=broad-except
                if self._expired():
                    raise _GaveUp(str(e)) from e
                backoff = self._failed("sending to", e, backoff)
        self._recovered()

    def _wait_for_lease(self) -> None:
        """Returns while model_dir's lease is held (no file read); waits while it is unconfirmed (a slow
        renewal); raises _LeaseLost once another trainer has it, so not one more message goes out."""
        lease = self.lease
        while lease is not None and not lease.held():
            if lease.lost:
                raise _LeaseLost(lease.lost)
            if self._expired():
                raise _GaveUp("model_dir's lease was not confirmed (see the lock's warnings)")
            time.sleep(0.05)

    def _publish(self, job: PublishJob) -> Optional[PublishResult]:
        """An incremental update: read, encode and send as one batch."""
        snapshot = self.read(job)
        if snapshot.empty:
            return None
        first = self._sequence()
        messages = encode_update(snapshot, self.model_name, first, self._update_id,
                                 self._max_bytes, {i: w for i, w in self._ids.tables.values()}, self.stream_id)
        self._send(list(zip(range(first, first + len(messages)), messages)))
        counts = snapshot.counts()
        return self._advance(len(messages), sum(len(m) for m in messages), snapshot.step, snapshot.create_time,
                             counts, False)

    def _stream_full_sync(self, job: PublishJob) -> Optional[PublishResult]:
        """Every row and dense parameter, read and sent in batches (module docstring). A read that fails
        midway leaves the sent messages on the stream (numbers used) without an end; a full sync follows."""
        counts: Dict[str, int] = {}
        row_bytes = max([8 + 4 * width for _, width in self._ids.tables.values()] or [8])
        pieces = full_sync_pieces(self._tables, self._ids, job.dense, job.deleted,
                                  max(self._send_bytes // row_bytes, 1), self.guard, counts)
        head = StreamHeader(self.model_name, job.step, job.create_time, job.positions, self._update_id, True,
                            self.stream_id)
        sent = size = 0
        batch: List[Tuple[int, bytes]] = []
        batch_bytes = 0
        first = self._sequence()
        try:
            for data in encode_stream(pieces, head, first, self._max_bytes):
                batch.append((first + sent + len(batch), data))
                batch_bytes += len(data)
                if batch_bytes >= self._send_bytes:
                    self._send(batch)
                    sent, size = sent + len(batch), size + batch_bytes
                    batch, batch_bytes = [], 0
            if batch:
                self._send(batch)
                sent, size = sent + len(batch), size + batch_bytes
        except BaseException:
            if sent:  # the messages sent are on the stream (their numbers are used), a sync without an end
                self.next_sequence = first + sent
                self._update_id += 1
            raise
        if not sent:
            return None
        return self._advance(sent, size, job.step, job.create_time, counts, True)

    def _sequence(self) -> int:
        """The next sequence number (``start`` sets it, before the sender thread runs)."""
        if self.next_sequence is None:
            raise RuntimeError("UpdatePublisher: start() was not called")
        return self.next_sequence

    def _advance(self, messages: int, size: int, step: int, create_time: float, counts: Dict[str, int],
                 full_sync: bool) -> PublishResult:
        first = self._sequence()
        result = PublishResult(first, first + messages - 1, step, create_time,
                               time.time(), size, counts.get("dense", 0), counts.get("rows", 0),
                               counts.get("deletes", 0), full_sync)
        self.next_sequence = first + messages
        self._update_id += 1
        self._stream_step = step
        return result

    def read(self, job: PublishJob) -> UpdateSnapshot:
        """The job's rows and deletes as they are in the tables now."""
        return take_snapshot(self._tables, self._ids, job.step, job.create_time, job.positions, job.dense,
                             job.trained, job.deleted, job.full_sync, self.guard)
