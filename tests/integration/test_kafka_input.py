"""KafkaInput against Apache Kafka: start positions (offsets, timestamps, checkpoints), partitions, brokers,
partial batches."""
import time

import pytest

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from easyonline.core.errors import ConfigError
from easyonline.inputs import KafkaInput
from easyonline.protos import pipeline_pb2
from easyonline.utils.net import free_port
from tests.conftest import leaves_no_kafka_client


BROKER = "apache_kafka"  # start positions are Kafka semantics: tansu answers offsets_for_times with 0


def _send(broker, topic, per_partition, partitions, timestamp_ms=None, prefix="r"):
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    for p in range(partitions):
        for i in range(per_partition):
            producer.send(topic, f"{prefix}{p}_{i}".encode(), partition=p, timestamp_ms=timestamp_ms)
    producer.flush()
    producer.close()


def _kafka(broker, topic, client="KAFKA_PYTHON", **fields):
    return pipeline_pb2.KafkaInput(server=broker.bootstrap, topic=topic, group="g_" + topic,
                                   client=pipeline_pb2.KafkaInput.Client.Value(client), **fields)


CLIENTS = pytest.mark.parametrize("client", ["KAFKA_PYTHON", "CONFLUENT_KAFKA"])


def _batches(source, expected: int, quiet: float = 1.0):
    """The batches of ``expected`` lines (up to 30 s for each: a first fetch includes connecting), then any
    that come before ``quiet`` seconds pass without one (so extra lines show in the test's assertions)."""
    lines = 0
    while True:
        batch = source.next_batch(30.0 if lines < expected else quiet)
        if batch is None:
            return
        lines += len(batch.lines)
        yield batch


def _drain(source, expected: int, quiet: float = 1.0):
    return [line for batch in _batches(source, expected, quiet) for line in batch.lines]


@CLIENTS
def test_earliest_reads_every_partition_and_tracks_positions(broker, topic, client):
    broker.create_topic(topic, 3)
    _send(broker, topic, 40, 3)
    source = KafkaInput(_kafka(broker, topic, client), batch_size=32, batch_timeout_ms=200)
    assert source.start_mode == "earliest" and len(source.partitions) == 3
    batches = list(_batches(source, 120))
    lines = [l for b in batches for l in b.lines]
    assert sorted(lines) == sorted(f"r{p}_{i}".encode() for p in range(3) for i in range(40))
    assert all(len(b.lines) <= 32 for b in batches)
    assert batches[-1].positions == {0: 40, 1: 40, 2: 40}
    assert batches[-1].lag == 0
    source.commit({0: 40, 1: 35, 2: 40})
    source.close()  # runs the queued commit
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="g_" + topic, enable_auto_commit=False)
    assert [consumer.committed(TopicPartition(topic, p)) for p in range(3)] == [40, 35, 40]
    consumer.close()


@CLIENTS
def test_offset_info_partition_offsets(broker, topic, client):
    broker.create_topic(topic, 2)
    _send(broker, topic, 20, 2)
    source = KafkaInput(_kafka(broker, topic, client, offset_info='{"0": 5, "1": 18}'), 100, 200)
    assert source.start_mode == "offset_info"
    lines = _drain(source, 17)
    assert sorted(lines) == sorted([f"r0_{i}".encode() for i in range(5, 20)] + [b"r1_18", b"r1_19"])
    source.close()


@CLIENTS
def test_checkpoint_positions_win_over_offset_info(broker, topic, client):
    broker.create_topic(topic, 2)
    _send(broker, topic, 10, 2)
    source = KafkaInput(_kafka(broker, topic, client, offset_info='{"0": 1, "1": 1}'), 100, 200,
                        checkpoint_positions={0: 8, 1: 9})
    assert source.start_mode == "checkpoint"
    assert sorted(_drain(source, 3)) == [b"r0_8", b"r0_9", b"r1_9"]
    source.close()


def _first_offsets_at_or_after(broker, topic, partitions, target_ms):
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    first = {}
    deadline = time.time() + 10
    seen = 0
    while time.time() < deadline and seen < 150 * partitions:
        for tp, records in consumer.poll(500).items():
            for r in records:
                seen += 1
                if r.timestamp >= target_ms and tp.partition not in first:
                    first[tp.partition] = r.offset
    consumer.close()
    return first


def test_timestamp_start_lands_on_first_record_at_or_after(broker, topic):
    broker.create_topic(topic, 2)
    base = int(time.time() * 1000) - 3_600_000
    for k in range(3):  # three groups of 50 records per partition, 10 minutes apart
        _send(broker, topic, 50, 2, timestamp_ms=base + k * 600_000, prefix=f"g{k}_")
    target_ms = base + 600_000 - 1  # just before the second group
    expected = _first_offsets_at_or_after(broker, topic, 2, target_ms)
    assert expected == {0: 50, 1: 50}
    for fields in ({"offset_info": '{"timestamp": %f}' % (target_ms / 1000)},
                   {"offset_time": str(target_ms / 1000)}):
        source = KafkaInput(_kafka(broker, topic, **fields), 1000, 200)
        assert source.start_mode == "timestamp"
        assert source.start_offsets == expected
        lines = _drain(source, 200)
        assert len(lines) == 200 and not any(l.startswith(b"g0_") for l in lines)
        source.close()


def test_timestamp_in_yyyymmdd_form_and_past_the_end(broker, topic):
    broker.create_topic(topic, 1)
    _send(broker, topic, 10, 1, timestamp_ms=int(time.time() * 1000) - 7200_000)
    future = time.strftime("%Y%m%d %H:%M:%S", time.localtime(time.time() + 3600))
    source = KafkaInput(_kafka(broker, topic, offset_time=future), 100, 200)
    assert source.start_offsets == {0: 10}
    assert _drain(source, 0, quiet=2.0) == []
    source.close()


def test_several_brokers_in_server_one_of_them_down(broker, topic):
    broker.create_topic(topic, 1)
    _send(broker, topic, 5, 1)
    dead = f"127.0.0.1:{free_port()}"
    kafka = pipeline_pb2.KafkaInput(server=f"{dead},{broker.bootstrap}", topic=topic, group="g")
    source = KafkaInput(kafka, 100, 200)
    assert sorted(_drain(source, 5)) == sorted(f"r0_{i}".encode() for i in range(5))
    source.close()


@CLIENTS
def test_slow_stream_flushes_partial_batches_after_the_timeout(broker, topic, client):
    broker.create_topic(topic, 1)
    source = KafkaInput(_kafka(broker, topic, client), batch_size=1000, batch_timeout_ms=300)
    assert source.next_batch(0.3) is None  # nothing yet
    _send(broker, topic, 7, 1)
    started = time.time()
    batch = source.next_batch(5.0)
    waited = time.time() - started
    assert batch is not None and len(batch.lines) == 7
    assert waited < 3.0  # flushed by batch_timeout_ms, not held for a full batch
    assert batch.positions == {0: 7}
    source.close()


@CLIENTS
def test_multi_line_messages_end_batches_on_message_boundaries(broker, topic, client):
    broker.create_topic(topic, 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for m in range(30):
        producer.send(topic, b"\n".join(f"m{m}_{i}".encode() for i in range(4)), partition=0)
    producer.flush()
    source = KafkaInput(_kafka(broker, topic, client), batch_size=10, batch_timeout_ms=200)
    total = 0
    for batch in _batches(source, 120):
        assert len(batch.lines) % 4 == 0
        assert batch.positions[0] * 4 == total + len(batch.lines)
        total += len(batch.lines)
    assert total == 120
    source.close()


def test_missing_topic_names_it(broker):
    kafka = pipeline_pb2.KafkaInput(server=broker.bootstrap, topic="no_such_topic_x", group="g")
    started = time.time()
    with leaves_no_kafka_client():  # the failed start closed its consumer
        try:
            KafkaInput(kafka, 10, 100, partition_wait_secs=2)
            raise AssertionError("expected an error")
        except ConnectionError as e:
            assert "no_such_topic_x" in str(e) and "kafka_train_input.topic" in str(e)
    assert time.time() - started < 20


def test_unreachable_broker_names_the_server():
    kafka = pipeline_pb2.KafkaInput(server=f"127.0.0.1:{free_port()}", topic="t", group="g")
    with leaves_no_kafka_client():  # the failed start closed its consumer
        try:
            KafkaInput(kafka, 10, 100)
            raise AssertionError("expected an error")
        except ConnectionError as e:
            assert "kafka_train_input.server" in str(e)


def test_checkpoint_offsets_past_the_end_resume_at_the_end_and_say_so_or_fail_as_configured(broker, topic):
    broker.create_topic(topic, 3)
    _send(broker, topic, 10, 3)
    saved = {0: 50, 1: 3}  # partition 0 as if the topic had been recreated; partition 2 never read
    source = KafkaInput(_kafka(broker, topic), 100, 200, checkpoint_positions=saved)
    assert source.start_offsets == {0: 10, 1: 3, 2: 0}
    assert "partition 0 moved 50 -> 10 (past its end 10" in source.start_mode
    assert "partition 2 has no position in the checkpoint" in source.start_mode
    assert sorted(_drain(source, 17)) == sorted([f"r1_{i}".encode() for i in range(3, 10)] +
                                            [f"r2_{i}".encode() for i in range(10)])
    source.close()
    with leaves_no_kafka_client(), pytest.raises(  # refused: its consumers closed
            ConfigError, match=r"on_offset_out_of_range: .*partition 0: the checkpoint's offset 50 is past its end 10"):
        KafkaInput(_kafka(broker, topic, on_offset_out_of_range=pipeline_pb2.KafkaInput.FAIL_OUT_OF_RANGE),
                   100, 200, checkpoint_positions=saved)


def test_checkpoint_positions_of_another_topic_or_of_vanished_partitions_fail_or_start_over(broker, topic):
    broker.create_topic(topic, 2)
    _send(broker, topic, 5, 2)
    with leaves_no_kafka_client(), pytest.raises(ConfigError, match=r"for topic 'old_topic', the config reads '" + topic):
        KafkaInput(_kafka(broker, topic), 100, 200, checkpoint_positions={0: 3, 1: 3}, checkpoint_topic="old_topic")
    with pytest.raises(ConfigError, match=r"name partitions \[0, 1, 2\] .* now has partitions \[0, 1\]"):
        KafkaInput(_kafka(broker, topic), 100, 200, checkpoint_positions={0: 3, 1: 3, 2: 3}, checkpoint_topic=topic)
    restart = pipeline_pb2.KafkaInput.START_FROM_CONFIG
    source = KafkaInput(_kafka(broker, topic, on_topic_change=restart), 100, 200,
                        checkpoint_positions={0: 3, 1: 3}, checkpoint_topic="old_topic")
    assert source.start_mode == "earliest" and len(_drain(source, 10)) == 10
    source.close()
    # a checkpoint from before topics were saved ("") is taken as this topic's
    source = KafkaInput(_kafka(broker, topic), 100, 200, checkpoint_positions={0: 3, 1: 3}, checkpoint_topic="")
    assert source.start_mode == "checkpoint" and len(_drain(source, 4)) == 4
    source.close()
