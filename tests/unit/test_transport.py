"""Where an update stream lives (transport.py): locations from the config and from an export, sinks and readers."""
import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before anything loads TensorFlow)

import time

import numpy as np
import pytest

from easyonline.config.kafka_settings import consumer_settings_from_flags
from easyonline.core.errors import ConfigError
from easyonline.protos import pipeline_pb2
from easyonline.updates.codec import UpdateSnapshot, decode_update, encode_update
from easyonline.updates.directory_sink import DirectorySink
from easyonline.updates.kafka_sink import KafkaSink
from easyonline.updates.readers import DirectoryUpdateReader, list_update_files, update_file_name
from easyonline.updates.transport import (DIRECTORY, KAFKA, StreamLocation, default_model_name, kafka_security, open_reader, open_sink,
                                          stream_model_name)


def _kafka_incr():
    incr = pipeline_pb2.IncrSaveConfig()
    incr.kafka.server = "127.0.0.1:9092"
    incr.kafka.topic = "deepfm_updates"
    return incr


def _fs_incr(directory):
    incr = pipeline_pb2.IncrSaveConfig()
    incr.fs.incr_save_dir = str(directory)
    return incr


def test_location_from_a_kafka_config():
    location = StreamLocation.from_config(_kafka_incr())
    assert location == StreamLocation(KAFKA, server="127.0.0.1:9092", topic="deepfm_updates")
    assert location.description == "kafka topic deepfm_updates at 127.0.0.1:9092"


def test_location_from_an_fs_config():
    location = StreamLocation.from_config(_fs_incr("oss://bucket/updates"))
    assert location == StreamLocation(DIRECTORY, directory="oss://bucket/updates")
    assert location.description == "directory oss://bucket/updates"


@pytest.mark.parametrize("location, info", [
    (StreamLocation(KAFKA, server="h:1", topic="t"), {"storage": "kafka", "server": "h:1", "topic": "t"}),
    (StreamLocation(DIRECTORY, directory="/x/y"), {"storage": "fs", "incr_save_dir": "/x/y"}),
])
def test_info_round_trip(location, info):
    assert location.to_info() == info
    assert StreamLocation.from_info(info) == location


@pytest.mark.parametrize("info", [{"storage": "none"}, {}, {"storage": "KAFKA", "server": "h:1", "topic": "t"}])
def test_info_naming_no_stream_is_none(info):
    assert StreamLocation.from_info(info) is None


@pytest.mark.parametrize("model_dir, name", [
    ("oss://bucket/a/b/", "b"),
    ("oss://bucket/a/b", "b"),
    ("/tmp/easyonline/online", "online"),
    ("relative/dir//", "dir"),
    ("/", "model"),  # no last component: the fallback name
])
def test_default_model_name(model_dir, name):
    assert default_model_name(model_dir) == name


def test_stream_model_name_prefers_the_config():
    incr = _kafka_incr()
    assert stream_model_name(incr, "oss://bucket/a/b/") == "b"
    incr.model_name = "ctr"
    assert stream_model_name(incr, "oss://bucket/a/b/") == "ctr"


def test_open_sink_picks_the_configured_transport(tmp_path):
    kafka = open_sink(_kafka_incr())  # only built: nothing connects before connect()
    assert isinstance(kafka, KafkaSink) and kafka.description == "kafka topic deepfm_updates at 127.0.0.1:9092"
    directory = open_sink(_fs_incr(tmp_path / "u"))
    assert isinstance(directory, DirectorySink) and directory.directory == str(tmp_path / "u")
    assert not (tmp_path / "u").exists()  # created by connect(), not by open_sink


def _messages(first_sequence, step, stream_id=77, create_time=None):
    snapshot = UpdateSnapshot(step=step, create_time=create_time or time.time(), positions={0: step})
    snapshot.deletes[3] = np.array([1, 2], np.int64)
    return encode_update(snapshot, "m", first_sequence, first_sequence, 1 << 16, {3: 4}, stream_id)


def test_directory_sink_and_reader_round_trip(tmp_path):
    incr = _fs_incr(tmp_path / "updates")
    sink = open_sink(incr)
    sink.connect()
    first, second = _messages(1, step=10)[0], _messages(2, step=20)[0]
    sink.send([(1, first), (2, second)], key=b"m")
    assert sorted(p.name for p in (tmp_path / "updates").iterdir()) == [  # named by stream (77) and sequence
        "LATEST", "update-00000000000000000077-000000000001.pb", "update-00000000000000000077-000000000001.pb.done",
        "update-00000000000000000077-000000000002.pb", "update-00000000000000000077-000000000002.pb.done"]
    assert (tmp_path / "updates" / "LATEST").read_text() == "77 2\n"  # the newest message, for readers' polls

    reader = open_reader(StreamLocation.from_config(incr))
    assert isinstance(reader, DirectoryUpdateReader) and reader.next_sequence == 1  # start 0 reads from sequence 1
    assert reader.lag_messages() == 2
    assert reader.read_available() == [(1, first), (2, second)]
    assert reader.lag_messages() == 0 and reader.poll() == []
    assert [decode_update(data).header.global_step for data in (first, second)] == [10, 20]

    later = open_reader(StreamLocation.from_config(incr), start=2)
    assert later.lag_messages() == 1 and later.read_available() == [(2, second)]
    # The first message stamped step 10 or later is sequence 1 (it may hold rows a checkpoint of step 10
    # lacks), 11 or later sequence 2; 21 or later there is none yet: the next one, 3. Each on the stream the
    # messages carry; a model without messages has no stream yet.
    assert later.start_at_step("m", 10) == (1, 1, 77)
    assert later.start_at_step("m", 11) == (2, 2, 77)
    assert later.start_at_step("m", 21) == (3, 3, 77)
    assert later.start_at_step("other", 20) == (1, 1, None)


def test_directory_reader_waits_for_the_done_file(tmp_path):
    sink = DirectorySink(str(tmp_path))
    sink.connect()
    sink.send([(1, _messages(1, step=1)[0])], key=b"m")
    (tmp_path / update_file_name(2, 77)).write_bytes(_messages(2, step=2)[0])  # written, not yet done
    reader = open_reader(StreamLocation(DIRECTORY, directory=str(tmp_path)))
    assert reader.lag_messages() == 1 and [s for s, _ in reader.read_available()] == [1]
    (tmp_path / (update_file_name(2, 77) + ".done")).write_bytes(b"")
    assert [s for s, _ in reader.read_available()] == [2]


def test_update_readers_take_the_streams_sasl_ssl_settings(monkeypatch):
    """Exports and servers read the update topic with the SASL/SSL settings of incr_save_config.kafka.config
    (``${NAME}`` resolved, values an export redacted left out, tuning settings not taken), and serve's
    ``--kafka_config`` over them."""
    monkeypatch.setenv("UPDATES_PASSWORD", "s3cret")
    incr = pipeline_pb2.IncrSaveConfig()
    incr.kafka.server, incr.kafka.topic = "127.0.0.1:1", "updates"
    incr.kafka.config.update({"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN",
                              "sasl_plain_username": "trainer", "sasl_plain_password": "${UPDATES_PASSWORD}",
                              "ssl_check_hostname": "false", "ssl_cafile": "<redacted>", "linger_ms": "5"})
    location = StreamLocation.from_config(incr)
    assert dict(location.client_settings) == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_plain_username": "trainer",
        "sasl_plain_password": "s3cret", "ssl_check_hostname": False}
    assert "client_settings" not in str(location.to_info()) and "s3cret" not in str(location.to_info())
    served = StreamLocation.from_info(location.to_info()).with_settings(
        {**kafka_security(incr), **consumer_settings_from_flags(["ssl_cafile=/etc/ca.pem", "fetch_max_wait_ms=50"],
                                                                "--kafka_config")})
    assert dict(served.client_settings)["ssl_cafile"] == "/etc/ca.pem"
    assert dict(served.client_settings)["fetch_max_wait_ms"] == 50
    with pytest.raises(ConfigError, match="--kafka_config acks: is not a kafka-python consumer setting"):
        consumer_settings_from_flags(["acks=all"], "--kafka_config")
    with pytest.raises(ConfigError, match="expected key=value"):
        consumer_settings_from_flags(["ssl_cafile"], "--kafka_config")


def test_directory_streams_do_not_collide_retention_deletes_old_files_and_reads_are_bounded(tmp_path):
    """A new stream numbers from 1 again beside the old one's files without colliding; the writer deletes
    the oldest files beyond retention_messages (the old stream's first); a reader reads at most max_files per
    call, follows its stream and the newer one, leaves older streams alone, and says when its start is gone."""
    old = DirectorySink(str(tmp_path), retention_messages=6)
    old.connect()
    old.send([(s, _messages(s, step=s, stream_id=5)[0]) for s in range(1, 5)], key=b"m")
    exported = open_reader(StreamLocation(DIRECTORY, directory=str(tmp_path)), 3, stream_id=5)
    new = DirectorySink(str(tmp_path), retention_messages=6)
    new.connect()
    # the new stream's messages are made later
    new.send([(s, _messages(s, step=10 + s, stream_id=6, create_time=time.time() + 1)[0]) for s in range(1, 5)], key=b"m")
    assert new.clean() == 0  # cleaned after the send already: the old stream's 1 and 2 went first
    groups = list_update_files(str(tmp_path))
    assert groups == {5: [3, 4], 6: [1, 2, 3, 4]}
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".done") and not p.with_suffix("").exists()]

    # The export's reader (stream 5 from 3): its stream, then the newer one, two files a call.
    exported.max_files = 2
    assert exported.lost_before_start() is None and exported.lag_messages() == 6
    read = []
    while batch := exported.read_available():
        assert len(batch) <= 2
        read.extend(decode_update(data).header for _, data in batch)
    assert [(h.stream_id, h.sequence) for h in read] == [(5, 3), (5, 4), (6, 1), (6, 2), (6, 3), (6, 4)]
    # A reader of the new stream never reads the old one; one whose start was deleted knows it.
    assert [s for s, _ in open_reader(StreamLocation(DIRECTORY, directory=str(tmp_path)), 1, 6).read_available()] \
        == [1, 2, 3, 4]
    late = open_reader(StreamLocation(DIRECTORY, directory=str(tmp_path)), 2, stream_id=5)
    assert late.lost_before_start() == f"messages 2..2 of stream 5 are gone from {tmp_path}"
    # the exporter finds the newest stream
    assert late.start_at_step("m", 12) == (2, 2, 6)


def test_directory_retention_by_age(tmp_path):
    sink = DirectorySink(str(tmp_path), retention_messages=0, retention_secs=60)
    sink.connect()
    stale = _messages(1, step=1, stream_id=5)[0]
    message = decode_update(stale)
    message.header.create_time = time.time() - 120  # two minutes old: past retention
    sink.send([(1, message.SerializeToString()), (2, _messages(2, step=2, stream_id=5)[0])], key=b"m")
    assert list_update_files(str(tmp_path)) == {5: [2]} and sink.deleted == 1


def test_a_directory_written_before_names_carried_the_stream_is_read_on_after_the_writer_names_it(tmp_path):
    """Files named update-<sequence>.pb (older writers) are the export's stream; when the upgraded writer
    goes on with update-<stream>-<sequence>.pb, the reader continues without reading the old files again."""
    for sequence in (1, 2):
        (tmp_path / update_file_name(sequence)).write_bytes(_messages(sequence, step=sequence, stream_id=5)[0])
        (tmp_path / (update_file_name(sequence) + ".done")).write_bytes(b"")
    reader = open_reader(StreamLocation(DIRECTORY, directory=str(tmp_path)), 1, stream_id=5)
    assert [s for s, _ in reader.read_available()] == [1, 2]
    sink = DirectorySink(str(tmp_path))
    sink.send([(3, _messages(3, step=3, stream_id=5)[0])], key=b"m")
    assert [s for s, _ in reader.read_available()] == [3] and reader.lag_messages() == 0


def test_an_export_whose_following_messages_retention_deleted_is_told(tmp_path):
    """start_at_step of a step older than every message left: the messages between are gone, and the
    reader says so (the exporter writes it into incr_update.txt, and its servers start behind)."""
    sink = DirectorySink(str(tmp_path), retention_messages=2)
    sink.send([(s, _messages(s, step=10 * s, stream_id=5)[0]) for s in range(1, 5)], key=b"m")
    reader = open_reader(StreamLocation(DIRECTORY, directory=str(tmp_path)))
    assert reader.start_at_step("m", 5) == (3, 3, 5)
    assert reader.lost.startswith("retention: the oldest message left is sequence 3 (step 30)")
    fresh = open_reader(StreamLocation(DIRECTORY, directory=str(tmp_path)))
    assert fresh.start_at_step("m", 31) == (4, 4, 5) and fresh.lost is None  # the message before its step is there
    # step 30: the oldest message left is stamped 30, one deleted before it may have been too
    assert fresh.start_at_step("m", 30) == (3, 3, 5) and fresh.lost.startswith("retention")
