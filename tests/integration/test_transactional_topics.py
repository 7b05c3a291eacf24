"""Topics as real producers write them: transactions with aborts, partitions added while reading.

The transactional stream is written by confluent-kafka's transactional producer (librdkafka, lz4), the
way Flink's and Kafka Streams' exactly-once sinks write, aborting every 4th transaction; the local broker
keeps the committed batches and a commit marker after each (markers take offsets no record fills).
"""
import threading

import confluent_kafka
import pytest

from easyonline.core.errors import ConfigError
from easyonline.inputs import KafkaInput
from easyonline.jobs.online_train import build_trainer
from easyonline.protos import pipeline_pb2
from easyonline.tools.stream_producer import SyntheticCtrStream
from tests.conftest import online_config
from tests.integration.test_kafka_input import CLIENTS, _batches, _drain, _kafka, _send

FAST = {"data_config.batch_size": 500, "train_config.save_checkpoints_secs": 0,
        "train_config.log_step_count_secs": 1}


def write_transactions(bootstrap, topic, lines, per_transaction, partitions, abort_every=4, codec="lz4"):
    """``lines`` in transactions of ``per_transaction`` spread over ``partitions``, every ``abort_every``-th
    aborted; returns the committed lines."""
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
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed.extend(chunk)
    return committed


@CLIENTS
def test_offline_run_on_a_transactional_topic_trains_each_committed_sample_once_and_ends(
        broker, topic, tmp_path, client):
    """Before: the run never ended (lag stayed at the last commit marker), for both clients."""
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
    # each partition: 1,800 records and 9 commit markers, all read
    assert summary.positions == {0: 1809, 1: 1809}


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


@CLIENTS
def test_partitions_added_while_reading_are_read_from_their_start_and_counted_in_lag(
        broker, topic, client, monkeypatch):
    """The local broker has no CreatePartitions: the reader is shown only partition 0 of a 3-partition
    topic at start (its first metadata answer is cut, a fake said here); the periodic refresh then asks
    the real broker, which tells all three."""
    broker.create_topic(topic, 3)
    _send(broker, topic, 40, 3)
    discover = KafkaInput._discover  # pylint: disable=protected-access

    def only_the_first(self, path, wait_secs):
        return discover(self, path, wait_secs)[:1]

    monkeypatch.setattr(KafkaInput, "_discover", only_the_first)
    source = KafkaInput(_kafka(broker, topic, client, partition_refresh_secs=1.0), batch_size=32,
                        batch_timeout_ms=200)
    assert [tp.partition for tp in source.partitions] == [0]
    batches = list(_batches(source, 120, quiet=3.0))
    lines = [line for batch in batches for line in batch.lines]
    assert sorted(lines) == sorted(f"r{p}_{i}".encode() for p in range(3) for i in range(40))
    assert [tp.partition for tp in source.partitions] == [0, 1, 2]
    assert batches[-1].positions == {0: 40, 1: 40, 2: 40}
    assert max(b.lag or 0 for b in batches if set(b.positions) == {0, 1, 2}) > 0  # the new ones showed as lag
    assert source.lag() == 0
    source.close()


@pytest.mark.parametrize("share", [(0, 2), (1, 2)])
def test_a_new_partition_goes_to_the_cluster_trainer_whose_index_matches(broker, topic, monkeypatch, share):
    """As above (the first metadata answer cut to partition 0): trainer i of n picks up p with p % n == i."""
    broker.create_topic(topic, 3)
    _send(broker, topic, 10, 3)
    discover = KafkaInput._discover  # pylint: disable=protected-access
    monkeypatch.setattr(KafkaInput, "_discover", lambda self, path, wait: discover(self, path, wait)[:1])
    source = KafkaInput(_kafka(broker, topic, partition_refresh_secs=0.5), batch_size=100, batch_timeout_ms=200,
                        partition_share=share)
    expected = [p for p in range(3) if p % 2 == share[0]]
    lines = [line for batch in _batches(source, 10 * len(expected), quiet=2.0) for line in batch.lines]
    assert sorted({line.split(b"_")[0] for line in lines}) == sorted(f"r{p}".encode() for p in expected)
    assert [tp.partition for tp in source.partitions] == expected
    source.close()


def _answer_out_of_range(source, monkeypatch, offset):
    """Makes the broker's next fetch answer at ``offset`` OFFSET_OUT_OF_RANGE (a fake answer: the local
    broker neither deletes records nor answers out of range; kafka-python's real fetcher handles it as a
    real Kafka's)."""
    import types  # pylint: disable=g-import-not-at-top
    fetcher = source._consumer._consumer._fetcher  # pylint: disable=protected-access
    parse = fetcher._parse_fetched_data  # pylint: disable=protected-access
    answered = []

    def out_of_range_once(completed_fetch):
        if not answered and completed_fetch.fetched_offset == offset:
            answered.append(offset)
            data = types.SimpleNamespace(error_code=1, high_watermark=-1, last_stable_offset=-1,
                                         log_start_offset=-1, aborted_transactions=None)
            completed_fetch = completed_fetch._replace(partition_data=data)
        return parse(completed_fetch)

    monkeypatch.setattr(fetcher, "_parse_fetched_data", out_of_range_once)
    return answered


@pytest.mark.parametrize("policy", ["RESUME_IN_RANGE", "FAIL_OUT_OF_RANGE"])
def test_a_position_out_of_range_while_reading_resumes_at_the_log_start_counted_or_fails(broker, topic, policy,
                                                                                        monkeypatch):
    """Retention deleted offsets 40-49 before they were read: the fetch at 40 answers out of range and the
    log now starts at 50 (both faked: _answer_out_of_range, and the log start through log_range). Before:
    kafka-python reset to the earliest offset the broker named, silently (librdkafka: to the end)."""
    broker.create_topic(topic, 1)
    _send(broker, topic, 40, 1)
    kafka = _kafka(broker, topic, on_offset_out_of_range=pipeline_pb2.KafkaInput.OnOffsetOutOfRange.Value(policy))
    source = KafkaInput(kafka, batch_size=100, batch_timeout_ms=200)
    assert len(_drain(source, 40)) == 40
    answered = _answer_out_of_range(source, monkeypatch, 40)
    monkeypatch.setattr(source._consumer, "log_range", lambda tp: (50, 60))  # pylint: disable=protected-access
    _send(broker, topic, 20, 1, prefix="n")  # offsets 40-59
    if policy == "FAIL_OUT_OF_RANGE":
        with pytest.raises(ConfigError, match=r"partition 0: the reader's offset 40 is below its log start 50"):
            for _ in range(60):
                source.next_batch(0.5)
        source.close()
        return
    lines = _drain(source, 10)
    assert answered == [40]
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
