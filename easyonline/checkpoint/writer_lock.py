"""One trainer per model_dir: a lease file, so a second trainer stops instead of writing beside the first.

Two trainers on one ``model_dir`` would both write checkpoints, positions and
update sequence numbers, and each would overwrite the other's. The lease is
a small JSON file, ``<model_dir>/TRAINER_LOCK``, that works on local disks
and on OSS alike (no file locking there): the owner rewrites its time every
``REFRESH_SECS``.

A trainer that starts and finds a lease:
- takes it at once if it was written on this host by a process that is no
  longer running (a restart after a crash or a kill);
- else watches it: if its owner rewrites it within ``STALE_SECS``, the owner
  is alive and the new trainer stops with ModelDirLockedError (exit code 6);
  if not, the owner is gone and the lease is taken over.
"""
import json
import logging
import os
import socket
import threading
import time
import uuid
from typing import Optional

from easyonline.core.errors import ModelDirLockedError
from easyonline.utils import fileio

log = logging.getLogger(__name__)

LOCK_FILE = "TRAINER_LOCK"
REFRESH_SECS = 5.0
STALE_SECS = 30.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # (a PermissionError: it runs, as another user)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


class WriterLock:
    """``acquire()`` before writing to model_dir, ``release()`` at the end; ``check()`` before each write."""

    def __init__(self, model_dir: str):
        self.path = fileio.join(model_dir, LOCK_FILE)
        self.token = uuid.uuid4().hex
        self.lost: Optional[str] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _read(self) -> Optional[dict]:
        try:
            return json.loads(fileio.read_text(self.path))
        except (FileNotFoundError, ValueError):
            return None

    def _write(self) -> None:
        fileio.write_text_atomic(self.path, json.dumps({
            "token": self.token, "host": socket.gethostname(), "pid": os.getpid(), "refreshed": time.time()}))

    def _describe(self, lease: dict) -> str:
        return f"a trainer (pid {lease.get('pid')} on {lease.get('host')})"

    def _wait_for_owner(self, lease: dict) -> None:
        """Returns when ``lease`` went stale; raises if its owner rewrites it."""
        log.info("%s holds %s; waiting up to %.0f s to see whether it is alive", self._describe(lease), self.path,
                 STALE_SECS)
        deadline = time.monotonic() + STALE_SECS
        while time.monotonic() < deadline:
            time.sleep(min(1.0, REFRESH_SECS / 2))
            now = self._read()
            if now is None:
                return
            if now.get("token") != lease.get("token") or now.get("refreshed") != lease.get("refreshed"):
                raise ModelDirLockedError(
                    f"another trainer is writing to this model_dir: {self._describe(now)} holds {self.path} and "
                    f"keeps it fresh. Two trainers on one model_dir would overwrite each other's checkpoints, "
                    f"positions and update sequence numbers: stop the other one, or give this one its own model_dir")
        log.warning("%s did not refresh %s for %.0f s: it is gone; taking the model_dir over",
                    self._describe(lease), self.path, STALE_SECS)

    def acquire(self) -> None:
        lease = self._read()
        if lease is not None and lease.get("token") != self.token:
            mine = lease.get("host") == socket.gethostname()
            if mine and (lease.get("pid") == os.getpid() or not _alive(int(lease.get("pid", -1)))):
                log.info("taking over %s from %s, which is no longer running", self.path, self._describe(lease))
            else:
                self._wait_for_owner(lease)
        self._write()
        self._thread = threading.Thread(target=self._refresh, name="model-dir-lock", daemon=True)
        self._thread.start()

    def _refresh(self) -> None:
        while not self._stop.wait(REFRESH_SECS):
            try:
                lease = self._read()
                if lease is not None and lease.get("token") != self.token:
                    self.lost = f"{self._describe(lease)} took over {self.path}"
                    log.error("%s: this trainer no longer owns its model_dir and stops writing to it", self.lost)
                    return
                self._write()
            except Exception as e:  # pylint: disable=broad-except
                log.warning("could not refresh %s (%s); retrying", self.path, e)  # e.g. a transient OSS error

    def check(self) -> None:
        """Raises ModelDirLockedError once another trainer took the model_dir over."""
        if self.lost:
            raise ModelDirLockedError(self.lost + "; stopping without writing to it")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(REFRESH_SECS + 5)
        try:
            lease = self._read()
            if lease is not None and lease.get("token") == self.token:
                fileio.remove_file(self.path)
        except Exception as e:  # pylint: disable=broad-except
            log.warning("could not remove %s (%s)", self.path, e)
