"""One trainer per model_dir: a lease taken by an exclusive create, so that of two trainers exactly one writes.

Two trainers on one ``model_dir`` would both write checkpoints, positions and
update sequence numbers, and each would overwrite the other's; on the update
topic, readers would take whichever copy of a sequence number came first. The
lease works on local disks and on OSS alike (no file locking there), built
from the operations both make atomic:

- ``<model_dir>/TRAINER_LOCK`` names the owner (token, pid, host). A trainer
  only ever *creates* it exclusively (``fileio.create_exclusive``: a hard link
  locally, a put with ``x-oss-forbid-overwrite`` on OSS): of trainers started
  together on a fresh model_dir exactly one creates it, the others find it.
- The owner shows it is alive in ``TRAINER_LOCK.<token>.alive``, rewritten
  every ``REFRESH_SECS``. It never rewrites TRAINER_LOCK, so an owner that
  was paused and wakes up cannot overwrite a successor's lease.
- A trainer that finds a lease takes it over only from an owner that is
  gone: at once when the lease names this host and a process no longer
  running; else when the owner's heartbeat stayed unchanged for
  ``STALE_SECS`` (a live owner: ModelDirLockedError, exit code 6). A takeover
  is exclusive too: the taker creates ``TRAINER_LOCK.takeover-<old token>``,
  so of two takers of one stale lease exactly one goes on (the other stops,
  naming it); it checks the lease is still the stale one, replaces it, then
  removes the claim (a later taker of that lease finds the new one and stops).
- The owner's renewal thread reads TRAINER_LOCK every refresh: another
  token there sets ``lost`` (ModelDirLockedError naming the new owner).
  ``held()``, which the update publisher asks before every send, reads no
  file: it is True while the last renewal that found the lease ours is
  younger than ``STALE_SECS / 2``. Nobody takes a lease over before its
  heartbeat was still for STALE_SECS, so an owner that was paused, or cut off
  from its model_dir, stops sending before anyone can have taken over, and
  sends again only once a renewal finds the lease still its own.

What remains: an owner that pauses for more than ``STALE_SECS / 2`` after
its last check *within* one send (the messages it had in hand may follow a
successor's), or between reading and removing its own lease at release.
Durations are measured on each host's monotonic clock; clocks of different
hosts are never compared. On OSS the bucket must not have versioning enabled:
OSS ignores ``x-oss-forbid-overwrite`` there.
"""
import hashlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from typing import Optional, Set, Tuple

from easyonline.core.errors import ModelDirLockedError
from easyonline.utils import fileio

log = logging.getLogger(__name__)

LOCK_FILE = "TRAINER_LOCK"
REFRESH_SECS = 5.0
STALE_SECS = 30.0
_ATTEMPTS = 10  # a lease released or taken between our looks: try again, this often
_HELD: Set[str] = set()  # tokens of the leases this process holds or is taking (a lease with our pid but
# another token is a live lock of this process only if listed here; else an earlier process that had the same
# pid, e.g. a restarted container's)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # (a PermissionError: it runs, as another user)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _describe(lease: Optional[dict]) -> str:
    if not lease or lease.get("unreadable"):
        return "a trainer (an unreadable lease)"
    return f"a trainer (pid {lease.get('pid')} on {lease.get('host')})"


class WriterLock:
    """``acquire()`` before writing to model_dir, ``release()`` at the end; ``check()`` in the loop,
    ``confirm()`` before a checkpoint, ``held()`` before each update sent (``core/lease.py``)."""

    def __init__(self, model_dir: str):
        self.path = fileio.join(model_dir, LOCK_FILE)
        self.token = uuid.uuid4().hex
        self.lost: Optional[str] = None
        self._confirmed: Optional[float] = None  # monotonic start of the last renewal that found the lease ours
        self._beats = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # --- files ----------------------------------------------------------------------
    def _heartbeat(self, token: str) -> str:
        return f"{self.path}.{token}.alive"

    def _claim(self, token: str) -> str:
        return f"{self.path}.takeover-{token}"

    def _lease_bytes(self) -> bytes:
        return json.dumps({"token": self.token, "host": socket.gethostname(), "pid": os.getpid(),
                           "acquired": time.time()}).encode()

    def _read(self, path: str = "") -> Optional[dict]:
        """The lease (or a claim) at ``path``; None if there is none. Unreadable content is a lease too,
        named by its hash, so it can go stale and be taken over like any other."""
        try:
            raw = fileio.read_bytes(path or self.path)
        except FileNotFoundError:
            return None
        try:
            lease = json.loads(raw)
            if isinstance(lease, dict) and lease.get("token"):
                return lease
        except ValueError:
            pass
        return {"token": "unreadable-" + hashlib.sha1(raw).hexdigest()[:16], "unreadable": True}

    def _owner_state(self, lease: dict) -> Tuple[object, ...]:
        """What changes while the lease's owner lives: its heartbeat (and ``refreshed`` of a lease written
        by an earlier version, which rewrote TRAINER_LOCK instead)."""
        try:
            beat = fileio.read_bytes(self._heartbeat(lease["token"]))
        except FileNotFoundError:
            beat = b""
        return lease["token"], lease.get("refreshed"), beat

    def _beat(self) -> None:
        self._beats += 1
        fileio.write_text_atomic(self._heartbeat(self.token), json.dumps({"beat": self._beats,
                                                                          "refreshed": time.time()}))

    # --- taking the lease -----------------------------------------------------------
    def _wait_for_owner(self, lease: dict) -> bool:
        """True when ``lease`` went stale; False when it was removed meanwhile; raises if its owner lives."""
        log.info("%s holds %s; waiting up to %.0f s to see whether it is alive", _describe(lease), self.path,
                 STALE_SECS)
        first = self._owner_state(lease)
        deadline = time.monotonic() + STALE_SECS
        while time.monotonic() < deadline:
            time.sleep(min(1.0, REFRESH_SECS / 2))
            now = self._read()
            if now is None:
                return False
            if now["token"] != lease["token"] or self._owner_state(now) != first:
                raise ModelDirLockedError(
                    f"another trainer is writing to this model_dir: {_describe(now)} holds {self.path} and "
                    f"keeps it fresh. Two trainers on one model_dir would overwrite each other's checkpoints, "
                    f"positions and update sequence numbers: stop the other one, or give this one its own model_dir")
        log.warning("%s did not refresh %s for %.0f s: it is gone; taking the model_dir over",
                    _describe(lease), self.path, STALE_SECS)
        return True

    def _take_over(self, stale: dict) -> bool:
        """Replaces ``stale`` by this lease, as the only taker; False if the lease was removed meanwhile."""
        claim = self._claim(stale["token"])
        if not fileio.create_exclusive(claim, self._lease_bytes()):
            raise ModelDirLockedError(
                f"{_describe(self._read(claim))} is taking {self.path} over from {_describe(stale)} at the same "
                f"moment; this trainer stops without writing to the model_dir")
        try:
            now = self._read()
            if now is None:
                return False
            if now["token"] != stale["token"]:
                raise ModelDirLockedError(f"{_describe(now)} took {self.path} over first; this trainer stops "
                                          f"without writing to the model_dir")
            fileio.write_bytes_atomic(self.path, self._lease_bytes())
        finally:
            fileio.remove_file(claim)  # (after the write: a later taker of ``stale`` reads this lease, and stops)
        fileio.remove_file(self._heartbeat(stale["token"]))
        return True

    def acquire(self) -> None:
        _HELD.add(self.token)  # from now: another lock of this process that finds our lease knows it lives
        try:
            self._acquire()
        except BaseException:
            _HELD.discard(self.token)
            raise

    def _acquire(self) -> None:
        for _ in range(_ATTEMPTS):
            started = time.monotonic()
            if fileio.create_exclusive(self.path, self._lease_bytes()):
                break
            lease = self._read()
            if lease is None:
                continue  # released between our create and read
            here = lease.get("host") == socket.gethostname()
            if here and lease.get("pid") == os.getpid() and lease["token"] in _HELD:
                raise ModelDirLockedError(f"another trainer in this process holds {self.path}: one trainer per "
                                          f"model_dir; give this one its own model_dir")
            if here and (lease.get("pid") == os.getpid() or not _alive(int(lease.get("pid", -1)))):
                log.info("taking over %s from %s, which is no longer running", self.path, _describe(lease))
            elif not self._wait_for_owner(lease):
                continue
            started = time.monotonic()
            if self._take_over(lease):
                break
        else:
            raise ModelDirLockedError(f"{self.path} changed hands {_ATTEMPTS} times while this trainer tried to "
                                      f"take it: other trainers are starting on this model_dir")
        self._beat()
        self._confirmed = started
        self._thread = threading.Thread(target=self._refresh, name="model-dir-lock", daemon=True)
        self._thread.start()

    # --- keeping it -----------------------------------------------------------------
    def _renew(self) -> None:
        """Confirms the lease is ours and beats; sets ``lost`` when another trainer holds it."""
        started = time.monotonic()
        try:
            lease = self._read()
            if lease is None and fileio.create_exclusive(self.path, self._lease_bytes()):
                lease = {"token": self.token}  # removed (by hand?) and nobody else took it: ours again
            elif lease is None:
                lease = self._read()
            if lease is None or lease["token"] != self.token:
                self.lost = (f"{_describe(lease)} took over {self.path}" if lease else
                             f"{self.path} was removed and taken by another trainer")
                log.error("%s: this trainer no longer owns its model_dir and stops writing to it and publishing",
                          self.lost)
                return
            self._beat()
            self._confirmed = started
        except Exception as e:  # pylint: disable=broad-except
            log.warning("could not renew %s (%s); retrying (updates wait until it is renewed)", self.path, e)

    def _refresh(self) -> None:
        while not self._stop.wait(REFRESH_SECS):
            self._renew()
            if self.lost:
                return

    def held(self) -> bool:
        """No file read: not lost, and confirmed ours less than STALE_SECS / 2 ago (module docstring)."""
        confirmed = self._confirmed
        return self.lost is None and confirmed is not None and time.monotonic() - confirmed < STALE_SECS / 2

    def check(self) -> None:
        """Raises ModelDirLockedError once another trainer took the model_dir over (no file read)."""
        if self.lost:
            raise ModelDirLockedError(self.lost + "; stopping without writing to it")

    def confirm(self) -> None:
        """``check``, renewing first unless ``held`` (before a checkpoint: a trainer that was paused must not
        write one into a successor's model_dir before its renewal thread runs)."""
        if not self.held() and self.lost is None:
            self._renew()
        self.check()

    def release(self) -> None:
        _HELD.discard(self.token)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(REFRESH_SECS + 5)
        try:
            if self.held():
                lease = self._read()
                if lease is not None and lease["token"] == self.token:
                    fileio.remove_file(self.path)
            elif self.lost is None:
                log.warning("leaving %s: it was not confirmed for %.0f s, so another trainer may hold it now "
                            "(the next trainer takes it over once it is stale)", self.path, STALE_SECS / 2)
            fileio.remove_file(self._heartbeat(self.token))
        except Exception as e:  # pylint: disable=broad-except
            log.warning("could not remove %s (%s)", self.path, e)
