"""Topics as real producers write them, on Apache Kafka: transactions with aborts, partitions added while
reading, records deleted by retention.

The transactional stream is written by confluent-kafka's transactional producer (librdkafka, lz4 or zstd),
the way Flink's and Kafka Streams' exactly-once sinks write, aborting every 4th transaction after its
batches reached the broker; Apache Kafka keeps the aborted batches in the log, lists them as aborted in
fetch answers, and writes a commit or abort marker after each transaction (markers take offsets no record
fills). Partitions are added with CreatePartitions, records deleted with DeleteRecords, as operators and
retention do.
"""
import threading
import time

import confluent_kafka
import pytest
from kafka import KafkaProducer

from easyonline.core.errors import ConfigError
from easyonline.inputs import KafkaInput
from easyonline.jobs.online_train import build_trainer
from easyonline.protos import pipeline_pb2
from easyonline.tools.stream_producer import SyntheticCtrStream
from tests.conftest import online_config
from tests.integration.test_kafka_input import CLIENTS, _batches, _drain, _kafka

BROKER = "apache_kafka"  # (tests/conftest.py)

FAST = {"data_config.batch_size": 500, "train_config.save_checkpoints_secs": 0,
        "train_config.log_step_count_secs": 1}


def write_transactions(bootstrap, topic, lines, per_transaction, partitions, abort_every=4, codec="lz4",
                       send_before_abort=True):
    """``lines`` in transactions of ``per_transaction`` spread over ``partitions``, every ``abort_every``-th
    aborted, after its batches reached the log unless ``send_before_abort`` is False; returns the committed
    lines. Tests on the embedded tansu broker pass False: it keeps aborted batches that reached it."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}",
                                         "compression.type": codec, "linger.ms": 5})
    producer.init_transactions(30)
    committed = []
    for t, start in enumerate(range(0, len(lines), per_transaction)):
        chunk = lines[start:start + per_transaction]
        producer.begin_transaction()
        for i, line in enumerate(chunk):
            producer.produce(topic, line, partition=i % partitions)
        if (t + 1) % abort_every == 0:
            if send_before_abort:
                assert producer.flush(30) == 0  # the aborted batches are in the log, before the abort marker
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed.extend(chunk)
    return committed


@pytest.mark.parametrize("client,codec", [("KAFKA_PYTHON", "zstd"), ("CONFLUENT_KAFKA", "lz4"),
                                          ("KAFKA_PYTHON", "lz4"), ("CONFLUENT_KAFKA", "zstd")])
def test_a_committed_reader_returns_exactly_the_committed_records(broker, topic, client, codec):
    """Both data clients, both codecs: every committed record once, no aborted one, positions at the log end
    (past the last abort marker)."""
    broker.create_topic(topic, 2)
    lines = [f"x{i}".encode() for i in range(1200)]
    committed = write_transactions(broker.bootstrap, topic, lines, 100, 2, codec=codec)
    assert len(committed) == 900
    source = KafkaInput(_kafka(broker, topic, client), batch_size=128, batch_timeout_ms=200)
    batches = list(_batches(source, len(committed)))
    read = [line for batch in batches for line in batch.lines]
    assert len(read) == len(committed) and sorted(read) == sorted(committed)
    assert batches[-1].positions == broker.log_ends(topic) == {0: 612, 1: 612}  # 600 records, 12 markers
    source.close()


@CLIENTS
def test_offline_run_on_a_transactional_topic_trains_each_committed_sample_once_and_ends(
        broker, topic, tmp_path, client):
    """Exactly the 3,600 committed samples train, none of the 1,200 aborted; the offline run ends by itself
    (before: it never ended, lag stayed at the last commit marker), for both clients."""
    broker.create_topic(topic, 2)
    lines = SyntheticCtrStream().lines(0, 4800)
    committed = write_transactions(broker.bootstrap, topic, lines, 400, 2)
    assert len(committed) == 3600
    config = online_config(tmp_path / "model", broker.bootstrap, topic, **FAST)
    config.kafka_train_input.client = pipeline_pb2.KafkaInput.Client.Value(client)
    trainer = build_trainer(config, online=False)
    backstop = threading.Timer(240, trainer.stop, args=("test backstop: the run did not end by itself",))
    backstop.start()
    try:
        summary = trainer.run()
    finally:
        backstop.cancel()
    assert summary.stop_reason == "caught up with the topic (offline run)"
    assert summary.samples == len(committed)
    # each partition: 2,400 records (600 of them aborted) and 12 markers, all read
    assert summary.positions == broker.log_ends(topic) == {0: 2412, 1: 2412}


@CLIENTS
def test_an_open_transaction_is_not_lag_for_a_committed_reader(broker, topic, client):
    """Lag is measured against the last stable offset: records of a transaction still open are not
    readable, so a reader that read the rest has lag 0 (before: the high watermark counted them)."""
    broker.create_topic(topic, 1)
    committed = write_transactions(broker.bootstrap, topic, [f"c{i}".encode() for i in range(30)], 10, 1,
                                   abort_every=99)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"open-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, f"open{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    source = KafkaInput(_kafka(broker, topic, client), batch_size=100, batch_timeout_ms=200)
    lines = [line for batch in _batches(source, len(committed)) for line in batch.lines]
    assert sorted(lines) == sorted(committed)
    for _ in range(60):  # librdkafka tells the last stable offset in its statistics, once a second
        if source.next_batch(0.5) is None and source.idle_lag == 0:
            break
    assert source.idle_lag == 0 and source.lag() == 0
    assert source._positions == {0: 33}  # pylint: disable=protected-access  (30 records, 3 markers)
    producer.abort_transaction(30)
    source.close()


def _send_to(broker, topic, partitions, count, prefix="r"):
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    for p in partitions:
        for i in range(count):
            producer.send(topic, f"{prefix}{p}_{i}".encode(), partition=p)
    producer.flush()
    producer.close()


@CLIENTS
def test_partitions_added_while_reading_are_read_from_their_start_and_counted_in_lag(
        broker, topic, client):
    """CreatePartitions on a topic being read: the new partitions are read within the refresh period, from
    their start, and show in the lag until read."""
    broker.create_topic(topic, 1)
    _send_to(broker, topic, [0], 40)
    source = KafkaInput(_kafka(broker, topic, client, partition_refresh_secs=1.0), batch_size=32,
                        batch_timeout_ms=200)
    assert [tp.partition for tp in source.partitions] == [0]
    assert sorted(_drain(source, 40)) == sorted(f"r0_{i}".encode() for i in range(40))
    broker.create_partitions(topic, 3)
    _send_to(broker, topic, [1, 2], 40)
    added = time.time()
    batches = list(_batches(source, 80, quiet=3.0))
    lines = [line for batch in batches for line in batch.lines]
    assert sorted(lines) == sorted(f"r{p}_{i}".encode() for p in (1, 2) for i in range(40))
    assert time.time() - added < 1.0 + 30.0 / 2  # read within the refresh period (and the first fetch's wait)
    assert [tp.partition for tp in source.partitions] == [0, 1, 2]
    assert batches[-1].positions == {0: 40, 1: 40, 2: 40}
    assert max(b.lag or 0 for b in batches if set(b.positions) == {0, 1, 2}) > 0  # the new ones showed as lag
    assert source.lag() == 0
    source.close()


@pytest.mark.parametrize("share", [(0, 2), (1, 2)])
def test_a_new_partition_goes_to_the_cluster_trainer_whose_index_matches(broker, topic, share):
    """As above, for trainer i of n: it picks up a new partition p only when p % n == i."""
    broker.create_topic(topic, 1)
    source = KafkaInput(_kafka(broker, topic, partition_refresh_secs=0.5), batch_size=100, batch_timeout_ms=200,
                        partition_share=share)
    broker.create_partitions(topic, 3)
    _send_to(broker, topic, [0, 1, 2], 10)
    expected = [p for p in range(3) if p % 2 == share[0]]
    lines = [line for batch in _batches(source, 10 * len(expected), quiet=2.0) for line in batch.lines]
    assert sorted({line.split(b"_")[0] for line in lines}) == sorted(f"r{p}".encode() for p in expected)
    assert len(lines) == 10 * len(expected)
    assert [tp.partition for tp in source.partitions] == expected
    source.close()


@CLIENTS
@pytest.mark.parametrize("policy", ["RESUME_IN_RANGE", "FAIL_OUT_OF_RANGE"])
def test_records_deleted_ahead_of_a_running_reader_are_counted_skipped_or_fail(broker, topic, policy, client):
    """Retention deletes offsets 40-49 before the reader got to them (DeleteRecords while it waits at 40):
    the broker answers its next fetch out of range, and the reader resumes at the new log start 50, counting
    the 10 in ``offsets_skipped`` and logging it, or fails naming the partition and the range (before: the
    clients reset silently, kafka-python to the earliest offset, librdkafka to the end).

    So that the reader does not fetch 40-59 before they are deleted, they are written in a transaction
    that is still open (a read_committed reader waits at the last stable offset, 40) and deleted up to 50
    before the transaction commits."""
    broker.create_topic(topic, 1)
    _send_to(broker, topic, [0], 40)
    kafka = _kafka(broker, topic, client,
                   on_offset_out_of_range=pipeline_pb2.KafkaInput.OnOffsetOutOfRange.Value(policy))
    source = KafkaInput(kafka, batch_size=100, batch_timeout_ms=200)
    assert len(_drain(source, 40)) == 40
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"d-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(20):
        producer.produce(topic, f"n0_{i}".encode(), partition=0)  # offsets 40-59
    assert producer.flush(30) == 0
    assert source.next_batch(1.0) is None  # waits at the last stable offset
    broker.delete_records(topic, {0: 50})
    producer.commit_transaction(30)  # marker at 60
    if policy == "FAIL_OUT_OF_RANGE":
        with pytest.raises(ConfigError, match=r"partition 0: the reader's offset 40 is below its log start 50"):
            for _ in range(60):
                source.next_batch(0.5)
        source.close()
        return
    lines = _drain(source, 10)
    assert lines == [f"n0_{i}".encode() for i in range(10, 20)]  # offsets 50-59
    assert source.offsets_skipped == 10
    source.close()


def test_librdkafka_out_of_range_reports_raise_instead_of_jumping():
    """librdkafka's report of a position out of range (auto.offset.reset=error) is raised as kafka-python's
    OffsetOutOfRangeError for KafkaInput to decide (a constructed message: the local broker never answers
    out of range); records before it in the same poll are handed out first."""
    from kafka.errors import OffsetOutOfRangeError  # pylint: disable=g-import-not-at-top
    from easyonline.inputs.confluent_consumer import ConfluentDataConsumer  # pylint: disable=g-import-not-at-top
    from easyonline.utils.net import free_port  # pylint: disable=g-import-not-at-top
    kafka = pipeline_pb2.KafkaInput(server=f"127.0.0.1:{free_port()}", topic="t", group="g")
    consumer = ConfluentDataConsumer(kafka, "kafka_train_input")
    assert consumer._consumer is not None  # pylint: disable=protected-access
    record = confluent_kafka.Message(topic="t", partition=0, offset=7, value=b"x")
    report = confluent_kafka.Message(topic="t", partition=0, offset=8,
                                     error=confluent_kafka.KafkaError(confluent_kafka.KafkaError._AUTO_OFFSET_RESET))  # pylint: disable=protected-access
    assert consumer._without_errors([record, report]) == [record]  # pylint: disable=protected-access
    consumer._assigned = True  # pylint: disable=protected-access
    with pytest.raises(OffsetOutOfRangeError) as raised:
        consumer.poll(10, 10)
    assert {tp.partition: o for tp, o in raised.value.args[0].items()} == {0: 8}
    consumer.close()
