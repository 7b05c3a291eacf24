"""A directory reader's poll costs the same whatever the retention: it lists the directory only when it must.

20,000 retained messages sit in the directory (their files, as retention keeps them; never read here). A
reader at the head of the stream polls by reading the writer's LATEST file and the files it names (idle:
and the next message's done-file): idle polls list nothing, locally (entries counted through a counting
wrapper of ``fileio.listdir``, which still lists) and on OSS (LIST requests counted at tests/fake_oss.py's
server, the existing emulation), and new messages are still read, in order. A missing file (retention) or
a new stream makes it list again.
"""
import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before anything loads TensorFlow)

import time

import numpy as np
import pytest

from easyonline.updates.codec import UpdateSnapshot, encode_update
from easyonline.updates.directory_sink import DirectorySink
from easyonline.updates.readers import DONE_SUFFIX, LATEST_FILE, DirectoryUpdateReader, read_latest, update_file_name
from easyonline.utils import fileio
from tests.fake_oss import configured_fake_oss

RETAINED = 20_000
STREAM = 77


def _message(sequence, stream_id=STREAM):
    snapshot = UpdateSnapshot(step=sequence, create_time=time.time(), positions={0: sequence})
    snapshot.deletes[3] = np.array([sequence], np.int64)
    return encode_update(snapshot, "m", sequence, sequence, 1 << 16, {3: 4}, stream_id)[0]


class CountingListdir:
    """fileio.listdir as it is, counting the calls and the names they returned."""

    def __init__(self, monkeypatch):
        self.calls = self.entries = 0
        real = fileio.listdir

        def listdir(path):
            names = real(path)
            self.calls += 1
            self.entries += len(names)
            return names

        monkeypatch.setattr(fileio, "listdir", listdir)


def _sequences(records):
    return [sequence for sequence, _ in records]


def test_idle_polls_list_nothing_whatever_the_retention_and_new_messages_are_read_in_order(tmp_path, monkeypatch):
    updates = tmp_path / "updates"
    updates.mkdir()
    for sequence in range(1, RETAINED + 1):  # the retained messages (not read: the reader starts after them)
        name = update_file_name(sequence, STREAM)
        (updates / name).write_bytes(b"")
        (updates / (name + DONE_SUFFIX)).write_bytes(b"")
    sink = DirectorySink(str(updates))
    sink.send([(RETAINED + 1, _message(RETAINED + 1))], b"m")
    assert read_latest(str(updates)) == (STREAM, RETAINED + 1)
    assert (updates / LATEST_FILE).read_text() == f"{STREAM} {RETAINED + 1}\n"

    listed = CountingListdir(monkeypatch)
    reader = DirectoryUpdateReader(str(updates), start_sequence=RETAINED + 1, stream_id=STREAM)
    assert _sequences(reader.poll()) == [RETAINED + 1]  # the first poll lists once, to find where it is
    first = (listed.calls, listed.entries)
    assert first[0] == 1 and first[1] >= 2 * RETAINED
    for _ in range(20):  # idle, as a server between updates (each poll followed by its lag, as serving asks)
        assert reader.poll() == [] and reader.lag_messages() == 0
    assert (listed.calls, listed.entries) == first  # not one more entry listed

    sink.send([(s, _message(s)) for s in range(RETAINED + 2, RETAINED + 6)], b"m")
    assert reader.lag_messages() == 0  # (as of the last read)
    assert _sequences(reader.poll()) == list(range(RETAINED + 2, RETAINED + 6))
    assert reader.lag_messages() == 0 and reader.poll() == []
    assert listed.calls == 1

    # retention deleted the next file before the reader came to it: it lists again and goes on after it
    sink.send([(s, _message(s)) for s in range(RETAINED + 6, RETAINED + 9)], b"m")
    (updates / update_file_name(RETAINED + 6, STREAM)).unlink()
    (updates / (update_file_name(RETAINED + 6, STREAM) + DONE_SUFFIX)).unlink()
    records = reader.poll() + reader.poll()
    assert _sequences(records) == [RETAINED + 7, RETAINED + 8] and listed.calls == 2
    for _ in range(5):
        assert reader.poll() == []
    assert listed.calls == 2

    # a new stream (a trainer that started afresh): listed once, then followed without listing
    newer = DirectorySink(str(updates))
    newer.send([(1, _message(1, stream_id=99))], b"m")
    assert _sequences(reader.poll()) == [1] and listed.calls == 3
    newer.send([(2, _message(2, stream_id=99))], b"m")
    assert _sequences(reader.poll()) == [2] and reader.poll() == [] and listed.calls == 3


def test_a_directory_without_latest_is_listed_at_every_poll_as_before(tmp_path, monkeypatch):
    """Files written before LATEST existed (or by an older writer): still read, by listing."""
    updates = tmp_path / "updates"
    DirectorySink(str(updates)).send([(1, _message(1)), (2, _message(2))], b"m")
    (updates / LATEST_FILE).unlink(missing_ok=True)
    listed = CountingListdir(monkeypatch)
    reader = DirectoryUpdateReader(str(updates), stream_id=STREAM)
    assert _sequences(reader.read_available(max_files=1)) == [1]
    assert _sequences(reader.read_available()) == [2] and reader.poll() == []
    assert listed.calls == 3



def _write_without_latest(updates, sequence, stream_id=STREAM):
    """A message written as a writer from before LATEST writes it: its file and done-file, LATEST untouched."""
    name = update_file_name(sequence, stream_id)
    (updates / name).write_bytes(_message(sequence, stream_id))
    (updates / (name + DONE_SUFFIX)).write_bytes(b"")


def test_messages_past_a_stale_latest_are_read_at_once_with_skipped_numbers_and_new_streams(tmp_path, monkeypatch):
    """LATEST left by a writer that keeps it, then messages by one that does not (a trainer from before LATEST
    writing on beside it): the reader at the head finds the next one by name, takes LATEST for stale and lists
    from then on, so numbers that writer skips (a restart above its reservation) and a stream it starts are
    read at their next poll, not after relist_secs."""
    updates = tmp_path / "updates"
    sink = DirectorySink(str(updates))
    sink.send([(1, _message(1)), (2, _message(2))], b"m")
    listed = CountingListdir(monkeypatch)
    reader = DirectoryUpdateReader(str(updates), stream_id=STREAM)
    assert _sequences(reader.poll()) == [1, 2] and reader.poll() == [] and listed.calls == 1  # at the head

    _write_without_latest(updates, 3)
    assert _sequences(reader.poll()) == [3] and listed.calls == 1  # by name: the next done-file
    _write_without_latest(updates, 5)  # 4 skipped: the listing finds 5
    assert _sequences(reader.poll()) == [5] and listed.calls == 2
    assert reader.poll() == [] and listed.calls == 3  # LATEST (2) is behind the files: listed at every poll
    _write_without_latest(updates, 1, stream_id=99)  # a new stream, LATEST still naming stream 77
    assert _sequences(reader.poll()) == [1] and listed.calls == 4

    # the writer that keeps LATEST goes on: read without listing again
    sink.send([(6, _message(6))], b"m")
    assert _sequences(reader.poll()) == [6]
    calls = listed.calls
    sink.send([(7, _message(7))], b"m")
    assert _sequences(reader.poll()) == [7] and reader.poll() == [] and listed.calls == calls


def test_a_reader_starting_beside_a_stale_latest_lists_and_reads_past_skipped_numbers(tmp_path):
    """A reader started when LATEST is already behind the files (a server started later, as from an export)
    never polls by the stale LATEST: the message after a number the writer skipped is read at the next poll."""
    updates = tmp_path / "updates"
    DirectorySink(str(updates)).send([(1, _message(1))], b"m")
    for sequence in (2, 3):
        _write_without_latest(updates, sequence)
    reader = DirectoryUpdateReader(str(updates), start_sequence=2, stream_id=STREAM)
    assert _sequences(reader.poll()) == [2, 3] and reader.poll() == []
    _write_without_latest(updates, 5)
    assert _sequences(reader.poll()) == [5]


def test_numbers_a_restarted_writer_skipped_are_listed_past(tmp_path, monkeypatch):
    """A writer that keeps LATEST, restarted after a crash, goes on above its reservation: LATEST names a file
    after missing ones; the reader lists once and goes on by name."""
    updates = tmp_path / "updates"
    sink = DirectorySink(str(updates))
    sink.send([(1, _message(1))], b"m")
    listed = CountingListdir(monkeypatch)
    reader = DirectoryUpdateReader(str(updates), stream_id=STREAM)
    assert _sequences(reader.poll()) == [1] and listed.calls == 1
    sink.send([(10_001, _message(10_001)), (10_002, _message(10_002))], b"m")
    assert _sequences(reader.poll() + reader.poll()) == [10_001, 10_002] and listed.calls == 2
    sink.send([(10_003, _message(10_003))], b"m")
    assert _sequences(reader.poll()) == [10_003] and reader.poll() == [] and listed.calls == 2

@pytest.fixture
def fake_oss():
    with configured_fake_oss() as fake:
        yield fake


def test_idle_polls_on_oss_issue_no_list_call_whatever_the_retention(fake_oss):
    lists = []
    handler = fake_oss.server.RequestHandlerClass
    real_get = handler.do_GET

    def counting_get(self):  # counts bucket listings (a GET without a key), then serves the request as it is
        if not self._parts()[1]:  # pylint: disable=protected-access
            lists.append(self.path)
        return real_get(self)

    handler.do_GET = counting_get
    objects = fake_oss.objects.setdefault("bkt", {})
    for sequence in range(1, RETAINED + 1):  # the retained messages, put in the emulation's store directly
        name = "updates/" + update_file_name(sequence, STREAM)
        objects[name] = objects[name + DONE_SUFFIX] = b""
    directory = "oss://bkt/updates"
    sink = DirectorySink(directory)
    sink.send([(RETAINED + 1, _message(RETAINED + 1))], b"m")
    reader = DirectoryUpdateReader(directory, start_sequence=RETAINED + 1, stream_id=STREAM)
    assert _sequences(reader.poll()) == [RETAINED + 1]
    first_listing = len(lists)
    assert first_listing >= 2 * RETAINED // 1000  # the one listing pages through every object
    requests = fake_oss.requests
    for _ in range(10):
        assert reader.poll() == [] and reader.lag_messages() == 0
    assert len(lists) == first_listing  # no LIST call while idle
    assert fake_oss.requests - requests == 20  # two small GETs a poll: LATEST and the next done-file
    sink.send([(s, _message(s)) for s in range(RETAINED + 2, RETAINED + 4)], b"m")
    after_send = len(lists)  # (the writer's own calls: its exists checks)
    assert _sequences(reader.poll()) == [RETAINED + 2, RETAINED + 3] and len(lists) == after_send
    assert fileio.exists(fileio.join(directory, LATEST_FILE))
