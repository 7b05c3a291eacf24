"""Reads update messages back from a Kafka topic or an incr_save_dir.

Used by serving, by ``tools.read_updates`` and by the publisher itself (to
continue the sequence numbers after a restart). Readers return raw bytes
with their position (Kafka offset, or sequence number for directories);
decoding and order checks are the caller's (codec.py, apply_rules.py).
"""
import logging
import re
import time
from typing import Dict, List, Optional, Tuple

from kafka import KafkaConsumer, TopicPartition
from kafka import errors as kafka_errors

from easyonline.config.kafka_settings import bootstrap_servers, connect_timeout
from easyonline.protos import update_pb2
from easyonline.utils import fileio, kafka_access

log = logging.getLogger(__name__)

PARTITION = 0
# update-<stream id, 20 digits>-<sequence, 12 digits>.pb; update-<sequence>.pb in directories written before
# file names carried the stream (read as a stream of its own, key None)
_FILE = re.compile(r"^update-(?:(\d{20})-)?(\d{12})\.pb$")
DONE_SUFFIX = ".done"
# The writer's pointer to its newest message, "<stream id> <sequence>", rewritten after every send: a reader at
# the head of that stream polls by reading it and the files it names, without listing the directory.
LATEST_FILE = "LATEST"
RELIST_SECS = 300.0  # a directory reader at the head of the stream still lists it this often (a safety net)
MAX_FILES_PER_READ = 256  # files one read_available returns at most (a message is up to max_message_bytes)


def update_file_name(sequence: int, stream_id: Optional[int] = None) -> str:
    """The file of message ``sequence`` of stream ``stream_id`` (None: the old name, without the stream)."""
    if stream_id is None:
        return f"update-{sequence:012d}.pb"
    return f"update-{stream_id:020d}-{sequence:012d}.pb"


def list_update_files(directory: str) -> Dict[Optional[int], List[int]]:
    """The complete messages (done-file written) in ``directory``: sorted sequences by stream id."""
    names = set(fileio.listdir(directory))
    groups: Dict[Optional[int], List[int]] = {}
    for name in names:
        match = _FILE.match(name)
        if match and name + DONE_SUFFIX in names:
            key = None if match.group(1) is None else int(match.group(1))
            groups.setdefault(key, []).append(int(match.group(2)))
    for sequences in groups.values():
        sequences.sort()
    return groups


def latest_text(stream_id: int, sequence: int) -> bytes:
    """The contents of LATEST_FILE naming message ``sequence`` of stream ``stream_id``."""
    return f"{stream_id} {sequence}\n".encode()


def read_latest(directory: str) -> Optional[Tuple[int, int]]:
    """(stream id, sequence) of LATEST_FILE in ``directory``; None when there is none (a writer from before it,
    or none yet) or it is unreadable."""
    try:
        stream, sequence = fileio.read_bytes(fileio.join(directory, LATEST_FILE)).split()
        return int(stream), int(sequence)
    except (FileNotFoundError, ValueError):
        return None


def header_of(data: bytes) -> Optional[update_pb2.UpdateHeader]:
    message = update_pb2.UpdateMessage()
    try:
        message.ParseFromString(data)
    except Exception:  # pylint: disable=broad-except  (garbage on the topic is not ours)
        return None
    return message.header


def _lost_before(first: update_pb2.UpdateHeader, step: int) -> Optional[str]:
    """Why a reader starting at ``first``, the oldest message of its model left, may lack what was published
    from ``step`` on (None: nothing is lost, it is the stream's first message or starts a full sync)."""
    if first.sequence <= 1 or (first.full_sync and first.part == 0):
        return None
    return (f"retention: the oldest message left is sequence {first.sequence} (step {first.global_step}); "
            f"those between step {step} and it are gone")


# Where a reader's SASL/SSL settings come from (serve and tools.tfserving_follower take --kafka_config over
# the export's incr_save_config.kafka.config): what a refusal's error names.
KAFKA_SETTINGS = "--kafka_config"


class KafkaUpdateReader:
    """Reads partition 0 of ``topic`` from ``start_offset``, without a consumer group."""

    def __init__(self, server: str, topic: str, start_offset: int = 0, extra: Optional[Dict] = None):
        # A fetch that finds nothing new waits at most 100 ms at the broker (kafka-python's default: 500), unless
        # the section's config says otherwise: a broker that does not answer a waiting fetch as soon as data
        # comes (tansu) held each update up to that long before serving saw it.
        settings = {"fetch_max_wait_ms": 100,
                    **{k: v for k, v in (extra or {}).items() if k in KafkaConsumer.DEFAULT_CONFIG}}
        settings.update(bootstrap_servers=bootstrap_servers(server), group_id=None, enable_auto_commit=False,
                        auto_offset_reset="earliest", request_timeout_ms=10000, **connect_timeout(5000),
                        client_id="easyonline-update-reader", max_partition_fetch_bytes=16 * 1024 * 1024,
                        fetch_max_bytes=64 * 1024 * 1024)
        self.topic = topic
        self.lost: Optional[str] = None  # set by start_at_step when the messages from the step on may be gone
        self._settings, self._server = settings, server
        started = time.time()
        try:
            self._consumer = kafka_access.started_client(KafkaConsumer, **settings)
        except kafka_errors.KafkaError:
            refused = kafka_access.refusal(started, settings, server, KAFKA_SETTINGS)
            if refused is not None:
                raise refused from None
            raise
        self._tp = TopicPartition(topic, PARTITION)
        self._consumer.assign([self._tp])
        self._consumer.seek(self._tp, start_offset)
        self._start = start_offset

    def lost_before_start(self) -> Optional[str]:
        """Why messages from the start offset on are gone (retention removed them: the partition now begins
        after it), None when none are. Kafka would silently reset to the earliest message."""
        try:
            begin = self._consumer.beginning_offsets([self._tp]).get(self._tp) or 0
        except kafka_errors.TopicAuthorizationFailedError:
            raise self._denied() from None
        if self._start < begin:
            return f"offset {self._start} of {self.topic} is gone (retention): the partition begins at {begin}"
        return None

    def seek(self, offset: int) -> None:
        self._consumer.seek(self._tp, offset)

    @property
    def position(self) -> int:
        return self._consumer.position(self._tp)

    def highwater(self) -> Optional[int]:
        """The end of the partition as of the last fetch (right even where end_offsets is not)."""
        return self._consumer.highwater(self._tp)

    def lag_messages(self) -> Optional[int]:
        """Messages after the position, by the last fetch's high watermark (None before any fetch)."""
        high = self.highwater()
        return None if high is None else max(high - self.position, 0)

    def _denied(self) -> Exception:
        return kafka_access.denied(self._settings, "READ", "topic", self.topic, "the update topic; READ includes "
                                   "DESCRIBE", self._server)

    def poll(self, timeout_ms: int = 500) -> List[Tuple[int, bytes]]:
        try:
            records = self._consumer.poll(timeout_ms=timeout_ms).get(self._tp, [])
        except kafka_errors.TopicAuthorizationFailedError:
            raise self._denied() from None
        return [(r.offset, r.value) for r in records]

    def read_available(self, timeout_secs: float = 10.0) -> List[Tuple[int, bytes]]:
        """Everything from the current position to the end of the partition (bounded by ``timeout_secs``).

        Quiet polls end it only once a fetch has told where the end is: before that, a slow first
        connection would look like an empty topic."""
        out: List[Tuple[int, bytes]] = []
        deadline = time.time() + timeout_secs
        empty_polls = 0
        while time.time() < deadline:
            batch = self.poll(200)
            out.extend(batch)
            high = self.highwater()
            if not batch and high is not None:
                empty_polls += 1
                if self.position >= high or empty_polls >= 5:
                    break
        return out

    def start_at_step(self, model_name: str, step: int, window: int = 256) -> Tuple[int, int, Optional[int]]:
        """(offset, sequence, stream id) of the first message of ``model_name`` stamped ``step`` or later: where
        a model exported from a checkpoint of that step starts following (a message stamped with the step may
        hold rows the checkpoint lacks; one stamped before it may not: publish_callback.py). The end of the
        topic when there is none yet (stream id None when the topic holds no message of the model: the reader
        takes the first stream it meets)."""
        begin, end = self._bounds()
        hi = end
        records: List[Tuple[int, Optional[update_pb2.UpdateHeader]]] = []
        while True:
            lo = max(begin, hi - window)
            records = self._read_range(lo, hi) + records
            ours = [(offset, h) for offset, h in records if h is not None and h.model_name == model_name]
            if lo <= begin or (ours and ours[0][1].global_step < step):
                newer = [(offset, h) for offset, h in ours if h.global_step >= step]
                if newer:
                    if newer[0] is ours[0] and begin > 0:
                        self.lost = _lost_before(newer[0][1], step)
                    return newer[0][0], newer[0][1].sequence, newer[0][1].stream_id
                if ours:
                    return max(records[-1][0] + 1, end), ours[-1][1].sequence + 1, ours[-1][1].stream_id
                return end, 1, None
            hi, window = lo, min(window * 2, 65536)

    def _bounds(self) -> Tuple[int, int]:
        """(first, end) offsets of the partition: retention may have removed the messages before the first."""
        begin = self._consumer.beginning_offsets([self._tp]).get(self._tp) or 0
        return begin, max(self._consumer.end_offsets([self._tp]).get(self._tp) or 0, begin)

    def _read_range(self, start: int, end: int, timeout_secs: float = 30.0
                    ) -> List[Tuple[int, Optional[update_pb2.UpdateHeader]]]:
        """(offset, header or None) of the messages in [start, end)."""
        out: List[Tuple[int, Optional[update_pb2.UpdateHeader]]] = []
        if start >= end:
            return out
        self.seek(start)
        deadline, empty_polls = time.time() + timeout_secs, 0
        while self.position < end and time.time() < deadline and empty_polls < 5:
            batch = self.poll(200)
            empty_polls = 0 if batch else empty_polls + 1
            out.extend((offset, header_of(value)) for offset, value in batch if offset < end)
        return out

    def close(self) -> None:
        self._consumer.close()


class DirectoryUpdateReader:
    """Reads ``incr_save_dir``: messages whose done-file exists, in sequence order, a bounded number at a time.

    A directory may hold the files of several streams of the model (a trainer that started a new stream
    writes beside the old one's files, until retention deletes them). The reader follows its own stream
    (``stream_id``, from the export) and every stream newer than it, in the order they were written;
    streams older than its own, found at its first listing, are left alone. Without a ``stream_id`` it
    reads every stream.

    A poll costs the same whatever the retention: once a full listing showed the reader at the head of the
    stream the writer's LATEST_FILE names (nothing of another stream waiting, and LATEST_FILE not behind
    that stream's files: a writer keeps it), each poll reads that file and then the files up to the
    sequence it names, by name; when it names what was read, the next message's done-file: an idle poll is
    two small reads and no listing (a listing of 100,000 files took 0.3 s of CPU, or ~200 LIST calls on
    OSS). It lists the directory again when LATEST_FILE names another stream (a new one), when a file it
    names is gone (retention, or numbers a restarted writer skipped: the listing finds where the stream
    resumes), when that next done-file is there (LATEST_FILE is behind the files: a writer that does not
    keep it, from before it, writes on, and may as well skip numbers or start a stream LATEST_FILE never
    names), every ``relist_secs`` (a safety net: a stale LATEST_FILE beside an older writer's new stream or
    skipped numbers, before any message found by name showed it stale), and at every poll of a directory
    without LATEST_FILE or whose LATEST_FILE is behind its files (older writers: read as before).
    """

    def __init__(self, directory: str, start_sequence: int = 1, stream_id: Optional[int] = None,
                 max_files: int = MAX_FILES_PER_READ, relist_secs: float = RELIST_SECS):
        self.directory = directory
        self.relist_secs = relist_secs
        self._relist_at = 0.0
        self.next_sequence = start_sequence  # in the reader's own stream
        self.stream_id = stream_id
        self.max_files = max_files
        self._next: Dict[Optional[int], int] = {}  # the next sequence of each other stream read
        self._ignored: Optional[set] = None  # streams older than its own, decided at the first listing
        self._times: Dict[Tuple[Optional[int], int], float] = {}
        self.lost: Optional[str] = None  # set by start_at_step when the messages from the step on may be gone
        self._own_key: Optional[int] = stream_id
        # where another stream is read from: its first file, or without a stream of its own, the start given
        self._other_start = 1 if stream_id is not None else start_sequence
        # the stream whose head the reader is at (polls read LATEST_FILE instead of listing); None: list
        self._head: Optional[int] = None
        self._by_name = False  # whether the last _pending came from LATEST_FILE (no listing)
        self._lag: Optional[int] = None  # messages waiting after the last read, None before any
        self.listings = 0  # full listings of the directory (each of every file in it)

    def _path(self, key: Optional[int], sequence: int) -> str:
        return fileio.join(self.directory, update_file_name(sequence, key))

    def _created(self, key: Optional[int], sequence: int) -> float:
        """A message's create_time (cached; -1 when unreadable)."""
        if (key, sequence) not in self._times:
            header = header_of(fileio.read_bytes(self._path(key, sequence)))
            self._times[(key, sequence)] = -1.0 if header is None else header.create_time
        return self._times[(key, sequence)]

    def _own(self, groups: Dict[Optional[int], List[int]]) -> Optional[int]:
        if self.stream_id in groups or None not in groups:
            return self.stream_id
        return None  # a directory written before names carried the stream: its files are the stream

    def _complete(self, key: Optional[int], sequence: int) -> bool:
        """Whether a message's done-file is there (one small read: an existence check on OSS may list)."""
        try:
            fileio.read_bytes(self._path(key, sequence) + DONE_SUFFIX)
            return True
        except FileNotFoundError:
            return False

    def _next_of(self, key: Optional[int]) -> int:
        return self.next_sequence if key == self._own_key else self._next.get(key, self._other_start)

    def _pending(self) -> List[Tuple[Optional[int], int]]:
        """(stream, sequence) of every message not yet read, in reading order."""
        latest = read_latest(self.directory)
        self._by_name = latest is not None and self._head == latest[0] and time.time() < self._relist_at
        if latest is not None and self._by_name:
            key, start = latest[0], self._next_of(latest[0])
            if latest[1] >= start:
                return [(key, s) for s in range(start, latest[1] + 1)]
            # LATEST names what was read: the next done-files, in case a writer (from before LATEST) wrote on
            found: List[Tuple[Optional[int], int]] = []
            while len(found) < self.max_files and self._complete(key, start + len(found)):
                found.append((key, start + len(found)))
            if found:  # files past LATEST: a writer that does not keep it, which may also skip numbers or
                self._head = None  # start another stream LATEST never names; the next poll lists (and decides)
            return found
        self._relist_at = time.time() + self.relist_secs
        groups = list_update_files(self.directory)
        self.listings += 1
        pending = self._listed_pending(groups)
        # at the head of LATEST_FILE's stream when only its files wait and LATEST_FILE, read again after the
        # listing, names its newest listed message or a newer one: the next polls need no listing. One behind
        # the listing is stale (a writer that does not keep it wrote on beside it, or, for a moment, a keeping
        # writer between a message's done-file and LATEST_FILE): the directory is listed again at the next poll.
        latest = read_latest(self.directory)
        self._head = None
        if latest is not None and groups.get(latest[0], [0])[-1] <= latest[1] and \
                all(key == latest[0] for key, _ in pending) and \
                (latest[0] == self._own_key or latest[0] not in (self._ignored or set())):
            self._head = latest[0]
        return pending

    def _listed_pending(self, groups: Dict[Optional[int], List[int]]) -> List[Tuple[Optional[int], int]]:
        """``_pending`` from ``groups``, a listing of the whole directory."""
        own = self._own(groups)
        if own != self._own_key:  # its stream's files got named by the stream (a writer upgraded): one stream
            self._next[self._own_key] = self.next_sequence
            self._own_key = own
        if self._ignored is None:
            self._ignored = set()
            if own in groups and self.stream_id is not None:
                newest = self._created(own, groups[own][-1])
                self._ignored = {key for key, seqs in groups.items()
                                 if key != own and self._created(key, seqs[-1]) <= newest}
        out = [(own, s) for s in groups.get(own, []) if s >= self.next_sequence]
        others = []
        for key, sequences in groups.items():
            if key == own or key in self._ignored:
                continue
            waiting = [s for s in sequences if s >= self._next.get(key, self._other_start)]
            if waiting:
                others.append((self._created(key, waiting[0]), key, waiting))
        for _, key, waiting in sorted(others, key=lambda o: o[:1]):
            out.extend((key, s) for s in waiting)
        return out

    def sequences(self) -> List[int]:
        """The sequences of every complete message in the directory, all streams (sorted)."""
        return sorted(s for sequences in list_update_files(self.directory).values() for s in sequences)

    def poll(self, timeout_ms: int = 500) -> List[Tuple[int, bytes]]:
        """What is complete now (files do not block: ``timeout_ms`` is ignored)."""
        del timeout_ms
        return self.read_available()

    def lag_messages(self) -> Optional[int]:
        """Messages waiting after the last read (as that read found them: no second listing per poll), or
        now when nothing was read yet."""
        return len(self._pending()) if self._lag is None else self._lag

    def read_available(self, max_files: Optional[int] = None) -> List[Tuple[int, bytes]]:
        """The next complete messages, at most ``max_files`` (default: the reader's ``max_files``); call
        again for more. A file deleted (by retention) between listing and reading is skipped; one that
        LATEST_FILE implied is gone makes the next read list the directory, to find where the stream goes on."""
        out = []
        pending = self._pending()
        taken = 0
        for key, sequence in pending[:max_files or self.max_files]:
            try:
                data = fileio.read_bytes(self._path(key, sequence))
            except FileNotFoundError:
                if self._by_name:
                    self._head = None
                    break
                taken += 1
                continue
            taken += 1
            out.append((sequence, data))
            if key == self._own_key:
                self.next_sequence = sequence + 1
            else:
                self._next[key] = sequence + 1
        self._lag = len(pending) - taken
        return out

    def lost_before_start(self) -> Optional[str]:
        """Why messages the reader should read from its start are gone (retention), None when none are."""
        groups = list_update_files(self.directory)
        own = self._own(groups)
        if self.stream_id is None or self.next_sequence <= 1:
            return None
        if own in groups and groups[own][0] > self.next_sequence:
            return (f"messages {self.next_sequence}..{groups[own][0] - 1} of stream {self.stream_id} are gone from "
                    f"{self.directory}")
        if own not in groups and groups:
            return f"no message of stream {self.stream_id} is left in {self.directory}"
        return None

    def start_at_step(self, model_name: str, step: int) -> Tuple[int, int, Optional[int]]:
        """(sequence, sequence, stream id) of the first message stamped ``step`` or later, in the newest stream
        of ``model_name`` (see KafkaUpdateReader)."""
        newest: Optional[Tuple[float, Optional[int], List[int]]] = None
        for key, sequences in list_update_files(self.directory).items():
            header = header_of(fileio.read_bytes(self._path(key, sequences[-1])))
            if header is not None and header.model_name == model_name and \
                    (newest is None or header.create_time > newest[0]):
                newest = (header.create_time, key, sequences)
        if newest is None:
            return 1, 1, None
        _, key, sequences = newest
        stream_id = key
        first = None
        for sequence in reversed(sequences):
            header = header_of(fileio.read_bytes(self._path(key, sequence)))
            if header is not None and header.model_name == model_name:
                stream_id, first = header.stream_id, header
                if header.global_step < step:
                    return sequence + 1, sequence + 1, stream_id
        if first is not None:
            self.lost = _lost_before(first, step)
        return sequences[0], sequences[0], stream_id

    def close(self) -> None:
        pass
