"""model_dir's writer lock (checkpoint/writer_lock.py) on OSS, where a restart comes from another host.

Against tests/fake_oss.py (real HTTP through oss2, in-memory objects): no
real OSS is reachable from this machine. A second trainer process on a local
model_dir is tested in test_trainer.py.
"""
import json
import logging
import threading
import time

import pytest

from easyonline.checkpoint import writer_lock
from easyonline.checkpoint.writer_lock import WriterLock
from easyonline.core.errors import ModelDirLockedError
from easyonline.utils import fileio, oss
from tests.fake_oss import FakeOss

MODEL_DIR = "oss://bkt/models/m1"


@pytest.fixture
def fake_oss(monkeypatch):
    monkeypatch.setattr(writer_lock, "REFRESH_SECS", 0.2)
    monkeypatch.setattr(writer_lock, "STALE_SECS", 2.0)
    with FakeOss() as fake:
        oss.configure(fake.endpoint, "id", "secret")
        yield fake
        oss.configure("", "", "")


def _foreign_lease(refreshed: float) -> None:
    fileio.write_text_atomic(fileio.join(MODEL_DIR, "TRAINER_LOCK"), json.dumps(
        {"token": "other", "host": "another-pod", "pid": 1, "who": "trainer", "refreshed": refreshed}))


def test_a_live_trainer_on_another_host_keeps_the_model_dir(fake_oss):
    stop = threading.Event()

    def other_trainer():  # rewrites its lease, as a running trainer does
        while not stop.wait(0.2):
            _foreign_lease(time.time())

    _foreign_lease(time.time())
    thread = threading.Thread(target=other_trainer)
    thread.start()
    try:
        with pytest.raises(ModelDirLockedError, match="another trainer is writing to this model_dir.*another-pod"):
            WriterLock(MODEL_DIR).acquire()
    finally:
        stop.set()
        thread.join()
    assert json.loads(fileio.read_text(fileio.join(MODEL_DIR, "TRAINER_LOCK")))["token"] == "other"


def test_a_lease_nobody_refreshes_is_taken_over_and_the_old_owner_notices(fake_oss):
    _foreign_lease(time.time() - 3600)  # its trainer died on another host
    lock = WriterLock(MODEL_DIR)
    started = time.monotonic()
    lock.acquire()
    assert time.monotonic() - started >= 2.0  # it watched for STALE_SECS first
    lease = json.loads(fileio.read_text(fileio.join(MODEL_DIR, "TRAINER_LOCK")))
    assert lease["token"] == lock.token
    lock.check()  # still ours
    # the lease is refreshed while held (every REFRESH_SECS, 0.2 s here)
    deadline = time.monotonic() + 10
    while json.loads(fileio.read_text(fileio.join(MODEL_DIR, "TRAINER_LOCK")))["refreshed"] <= lease["refreshed"]:
        assert time.monotonic() < deadline, "the lease was not refreshed in 10 s"
        time.sleep(0.05)
    # a trainer that was paused past STALE_SECS and got taken over stops writing. The new owner keeps
    # refreshing its lease, as a running trainer does (a single write can land between the old owner's read
    # and write of its refresh, and be overwritten: the next one is seen)
    deadline = time.monotonic() + 10
    while not lock.lost:
        assert time.monotonic() < deadline, "the take-over was not noticed in 10 s"
        _foreign_lease(time.time())
        time.sleep(0.1)
    with pytest.raises(ModelDirLockedError, match="took over"):
        lock.check()
    lock.release()
    assert fileio.exists(fileio.join(MODEL_DIR, "TRAINER_LOCK"))  # not ours any more: left alone


def test_a_clean_release_removes_the_lease_and_the_next_trainer_starts_at_once(fake_oss, caplog):
    first = WriterLock(MODEL_DIR)
    first.acquire()
    first.release()
    assert not fileio.exists(fileio.join(MODEL_DIR, "TRAINER_LOCK"))
    second = WriterLock(MODEL_DIR)
    with caplog.at_level(logging.INFO, logger=writer_lock.__name__):
        second.acquire()
    # no lease was found: neither a wait for its owner nor a take-over
    assert not [r for r in caplog.records if "waiting" in r.getMessage() or "taking over" in r.getMessage()]
    second.release()
