"""Follows the update stream named in the export's incr_update.txt and applies it in order.

Rules (updates/apply_rules.py, the same for every reader, through its
StreamCursor): messages of other models are ignored; a sequence number at or
below the last applied is a duplicate and skipped; one above the next
expected is a gap, unless it starts a full sync (which re-sends everything,
so it heals the gap); a message of another stream of the model is refused
unless it starts that stream with a full sync; a message that does not
decode, or does not fit the export, is refused, and the rest of its poll is
still handled.

One refused message never stops the ones after it: the cursor moves past a
refused message of the stream (a gap, a message that does not fit, one whose
apply failed), so the next one is applied. The reader then knows it differs
from the trainer: it is *behind* (``behind`` says why; serve's readiness
endpoint answers 503) until a full sync it applied whole, from its part 0 to
its ``full_sync_end`` with nothing lost or refused in between, makes it
equal again: the sync's rows and dense parameters are written, and the rows
it did not carry are removed (updates/full_sync.py). The trainer sends a full
sync at every restart that needs one and every ``full_sync_secs``. A start
whose first messages are gone (retention) is behind from the start.

Every refusal is counted by reason and logged (at most once every 10 s per
reason). A broker outage is retried with backoff; nothing already applied is
lost.
"""
import collections
import logging
import threading
import time
from typing import Callable, Dict, List, Optional, Protocol

import numpy as np

from easyonline.core.errors import KafkaAccessError, error_text
from easyonline.protos import pipeline_pb2, update_pb2
from easyonline.updates.apply_rules import DUPLICATE, GAP, NEXT, OTHER_MODEL, OTHER_STREAM, StreamCursor
from easyonline.updates.codec import MalformedUpdateError, decode_update
from easyonline.updates.full_sync import FullSyncTracker, rows_to_remove, written_keys
from easyonline.updates.signing import UpdateSignatureError, UpdateVerifier
from easyonline.updates.transport import KAFKA, StreamLocation, kafka_security, open_reader
from easyonline.serve.status_log import broker_outage

log = logging.getLogger(__name__)


class UpdateTarget(Protocol):
    """What a follower applies the stream to: a LoadedExport (serve), or another server's update signature
    (tools/tfserving_follower.py). ``update_info`` is the export's incr_update.txt (read again by ``rewind``)."""

    update_info: dict
    config: pipeline_pb2.PipelineConfig

    def apply(self, message: update_pb2.UpdateMessage) -> int:
        """Applies one decoded message; ValueError (before anything is applied) when it does not fit."""

    @property
    def can_list_rows(self) -> bool:
        """False when the rows a full sync did not carry cannot be listed (so they stay)."""

    def held_keys(self) -> Dict[int, np.ndarray]:
        """The keys each table holds now, by table id."""

    def remove_rows(self, keys: Dict[int, np.ndarray]) -> int:
        """Removes ``keys`` ({table id: keys}); the number asked to remove."""


class UpdateFollower:
    def __init__(self, export: UpdateTarget, poll_secs: float = 0.2, kafka_settings: Optional[Dict] = None,
                 verifier: Optional[UpdateVerifier] = None):
        """``kafka_settings``: consumer settings for a Kafka stream (SASL/SSL, fetch tuning), over the
        SASL/SSL settings of the export's pipeline.config (its ``${NAME}`` references resolved here).
        ``verifier``: only messages whose MAC it verifies are applied (updates/signing.py); None: any."""
        self.export = export
        self.verifier = verifier
        self._kafka_settings = kafka_settings or {}
        self.stale_since: Optional[float] = None  # when a message of the model was refused, until one applies
        self.removed_by_sync = 0
        self.started = time.time()
        self.last_applied_at: Optional[float] = None  # when this server last applied a message
        self._other_stream: Optional[tuple] = None  # (stream id, when) of the last other_stream refusal
        self.last_create_time: Optional[float] = None
        self.applied = 0
        self.skipped = 0
        self.refused: Dict[str, int] = collections.Counter()
        self.lag_messages: Optional[int] = None
        self.error: Optional[str] = None
        self._poll_secs = poll_secs
        self._next_log: Dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._reader = None
        # Called in the follower's thread after each poll's messages were handled (a target that batches
        # what ``apply`` gave it sends the batch then).
        self.after_poll: Optional[Callable[[], None]] = None
        # Kafka refused this reader (a failed login, an untrusted certificate, an ACL): it stops, and
        # ``on_fatal`` (the command's stop) is called; the command then exits with the error's code.
        self.fatal: Optional[KafkaAccessError] = None
        self.on_fatal: Optional[Callable[[], None]] = None
        self._start_position()

    def _start_position(self) -> None:
        """Where the export says the stream starts, and what it says it lacks (retention)."""
        info = self.export.update_info
        self.location = StreamLocation.from_info(info)
        if self.location is not None and self.location.storage == KAFKA:
            incr = self.export.config.train_config.incr_save_config
            own = kafka_security(incr) if incr.WhichOneof("storage") == "kafka" else {}
            self.location = self.location.with_settings({**own, **self._kafka_settings})
        self.model_name = info.get("model_name", "")
        stream_id = info.get("stream_id")
        self.cursor = StreamCursor(self.model_name, int(info.get("sequence", 1)),
                                   None if stream_id is None else int(stream_id))
        # Why this reader knows it differs from the trainer (None: equal as far as it can tell), and since when.
        self.behind: Optional[str] = info.get("behind")
        self.behind_since: Optional[float] = time.time() if self.behind else None
        self.full_sync = FullSyncTracker()
        self.step: Optional[int] = info.get("step")
        if self.behind:  # the export found the messages after its step gone (retention)
            self.refused["retention"] += 1

    def rewind(self) -> None:
        """Starts again where ``export.update_info`` (read again by the caller) says the stream starts: for a
        target that lost what was applied (a server restarted from its export). Messages carry absolute
        values, so applying them again in order ends where the stream is. Called in the follower's thread."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._start_position()

    def record_external(self, headers: List[update_pb2.UpdateHeader], applied: Optional[int] = None) -> None:
        """Counts updates applied by another writer (serve --follow_updates=false: the update signatures over
        gRPC): the headers of the messages applied, in order, or ``applied`` updates without headers
        (incr_update_sig's tensors). The status then says what the server holds."""
        for header in headers:
            self.cursor.advance(header)
            self.step = header.global_step
            self.last_create_time = header.create_time
        count = len(headers) if applied is None else applied
        if count:
            self.last_applied_at = time.time()
            self.applied += count
            self.stale_since = None

    def refuse(self, reason: str, detail: str) -> None:
        """A message the target refused after ``apply`` accepted it (a batch its server refused): counted,
        logged, and the reader is behind until the next full sync."""
        self._refuse(reason, detail)
        self._mark_behind(reason)

    def start(self) -> "UpdateFollower":
        if self.location is None:
            log.warning("the export names no update stream: serving the exported parameters only")
            return self
        self._thread = threading.Thread(target=self._run, name="update-follower", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    @property
    def next_sequence(self) -> int:
        return self.cursor.next_sequence

    @property
    def last_sequence(self) -> int:
        return self.next_sequence - 1

    def lag_seconds(self) -> Optional[float]:
        """0 when caught up; else how old the newest applied update is (or, when none applied since the
        export, how long ago a message was refused). Caught up means at the end of the topic with the
        newest message of the model applied (or skipped as a duplicate), not refused."""
        if self.lag_messages == 0 and self.stale_since is None:
            return 0.0
        since = self.last_create_time if self.last_create_time is not None else self.stale_since
        return None if since is None else max(time.time() - since, 0.0)

    def seconds_since_update(self) -> float:
        """Seconds since this server last applied an update message (since it started, when none)."""
        return max(time.time() - (self.last_applied_at or self.started), 0.0)

    @property
    def ready(self) -> bool:
        """False while the reader knows it differs from the trainer."""
        return self.behind is None

    def _mark_behind(self, why: str) -> None:
        if self.behind is None:  # the first cause is what it says (later ones are counted)
            self.behind, self.behind_since = why, time.time()
            log.warning("serving is behind the trainer (%s) until the next full sync", why)
        self.full_sync.broken()

    def _open(self):
        if self.location.storage != KAFKA:
            reader = open_reader(self.location, self.next_sequence, self.cursor.stream_id)
        else:
            reader = open_reader(self.location, int(self.export.update_info["offset"]))
        try:
            lost = reader.lost_before_start()
        except Exception:
            reader.close()  # an outage: _run retries with a new reader
            raise
        if lost:
            self.refused["retention"] += 1
            self._mark_behind(f"retention: {lost}")
        return reader

    def _run(self) -> None:
        try:
            self._follow()
        finally:  # stopped: its consumer goes with it
            if self._reader is not None:
                self._reader.close()
                self._reader = None

    def _follow(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                if self._reader is None:
                    self._reader = self._open()
                records = self._reader.poll(500)
                for position, data in records:
                    try:
                        self.handle(data)
                    except Exception as e:  # pylint: disable=broad-except  (one bad message, not an outage)
                        self._refuse("failed", f"message at {position}: {type(e).__name__}: {e}")
                        self._mark_behind("failed")
                self.lag_messages = self._reader.lag_messages()
                if self.after_poll is not None:
                    self.after_poll()
                if self.error is not None:
                    log.info("update stream readable again")
                self.error = None
                backoff = 0.5
                if not records and self.location.storage != KAFKA:  # a directory does not block
                    self._stop.wait(self._poll_secs)
            except KafkaAccessError as e:  # retrying cannot help: one error, and the command stops
                log.error("reading updates: %s", e)
                self.fatal, self.error = e, str(e)
                if self._reader is not None:
                    self._reader.close()
                    self._reader = None
                if self.on_fatal is not None:
                    self.on_fatal()
                return
            except Exception as e:  # pylint: disable=broad-except  (outages: retry, keep serving)
                if self.error is None and broker_outage(self) is None:  # an outage: serve's status lines say it
                    log.error("reading updates failed (%s); serving goes on, retrying", error_text(e))
                self.error = error_text(e)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)

    def refuse_external(self, reason: str, detail: str) -> None:
        """An update refused over gRPC before anything was applied (unsigned, forged, NaN, oversized, out of
        order): counted and logged; what the server holds did not change, so it is neither stale nor behind."""
        self.refused[reason] += 1
        self._log_refusal(reason, detail, time.time())

    def _refuse(self, reason: str, detail: str) -> None:
        self.refused[reason] += 1
        now = time.time()
        if self.stale_since is None:
            self.stale_since = now
        self._log_refusal(reason, detail, now)

    def _log_refusal(self, reason: str, detail: str, now: float) -> None:
        if now >= self._next_log.get(reason, 0.0):
            log.error("refused an update message (%s): %s [%d so far]", reason, detail, self.refused[reason])
            self._next_log[reason] = now + 10

    def handle(self, data: bytes) -> bool:
        """Checks and applies one raw message; True if it was applied."""
        if self.verifier is not None:  # before anything reads it; a forged message does not make us behind
            try:
                self.verifier.verify(data)
            except UpdateSignatureError as e:
                self._refuse(e.reason, str(e))
                return False
        try:
            message = decode_update(data)
        except MalformedUpdateError as e:
            self._refuse("malformed", str(e))
            self._mark_behind("malformed")  # whose message it was is unknown: maybe ours
            return False
        header = message.header
        verdict = self.cursor.verdict(header)
        if verdict == OTHER_MODEL:
            return False
        if verdict == DUPLICATE:
            self.skipped += 1
            return False
        if verdict == OTHER_STREAM:
            self._other_stream = (header.stream_id, time.time())
        if verdict != NEXT:
            self._refuse(verdict, f"expected sequence {self.cursor.next_sequence} of stream {self.cursor.stream_id}, "
                                  f"got {header.sequence} of stream {header.stream_id}")
            self._mark_behind(verdict)
            if verdict == GAP:  # the lost messages are what is missing: move on, the next one applies
                self.cursor.advance(header)
            return False
        try:
            self.export.apply(message)
        except Exception as e:  # pylint: disable=broad-except  (a message that does not fit, or a failed apply)
            reason = "inconsistent" if isinstance(e, ValueError) else "failed"
            self._refuse(reason, f"sequence {header.sequence}: {type(e).__name__}: {e}")
            self._mark_behind(reason)
            self.cursor.advance(header)  # one refused message does not stop the ones after it
            return False
        if header.stream_id != self.cursor.stream_id and self.cursor.stream_id is not None:
            log.warning("following a new update stream %d from its full sync (was %d): the trainer found none "
                        "of the earlier messages on the topic", header.stream_id, self.cursor.stream_id)
        self._check_identity(header)
        self.cursor.advance(header)
        self.stale_since = None
        self.step = header.global_step
        self.last_create_time = header.create_time
        self.last_applied_at = time.time()
        self.applied += 1
        carried = self.full_sync.applied(header, written_keys(message))
        if carried is not None:
            self._sync_ended(carried)
        return True

    def _check_identity(self, header) -> None:
        """Messages of another stream of the model while its own stream goes on: two live trainers publish as
        one model (e.g. two model_dirs ending in the same name, the default model name). Logged as an error."""
        if self._other_stream is None or header.stream_id != self.cursor.stream_id:
            return
        other, seen = self._other_stream
        now = time.time()
        if now - seen < 600 and now >= self._next_log.get("identity", 0.0):
            log.error("two streams of model %r are live on %s: %d (followed) and %d (refused). Two trainers "
                      "publish as one model (model_dirs ending alike?): give each its own "
                      "incr_save_config.model_name or topic", self.model_name, self.location.description,
                      self.cursor.stream_id, other)
            self._next_log["identity"] = now + 600

    def _sync_ended(self, carried) -> None:
        """A full sync was applied whole: remove the rows it did not carry; the reader equals the trainer."""
        if self.export.can_list_rows:
            held = self.export.held_keys()
            extra = {table_id: rows_to_remove(keys, carried.get(table_id)) for table_id, keys in held.items()}
            removed = self.export.remove_rows(extra)
            self.removed_by_sync += removed
            if removed:
                log.info("a full sync ended: removed %d row(s) the trainer no longer has", removed)
        else:
            log.warning("a full sync ended, but %s", getattr(self.export, "cannot_list_rows_why",
                        "this export cannot list its rows (exported before table_keys existed): rows the trainer "
                        "no longer has stay; re-export to have them removed"))
        if self.behind is not None:
            log.info("serving equals the trainer again after a full sync (was behind: %s, for %.0f s)",
                     self.behind, time.time() - (self.behind_since or time.time()))
        self.behind = self.behind_since = None
