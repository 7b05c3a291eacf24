"""A multi-task model (MMoE, two labels) run the way production runs it: its stream written by a
transactional, zstd-compressing producer that aborts every 4th transaction, while it trains; the trainer
SIGKILLed at a random moment after a checkpoint, then restarted.

Checked: every committed sample trained, none of an aborted transaction, repeats only of what followed
the last checkpoint before the kill; each sample's two labels reached the model's tasks as written (the
recorder, tests/fault_trainer.py, writes the labels the parser handed over, by label field); and the
updates published across the crash (the restart's full sync heals the jump) replay into a copy equal to
the final checkpoint. The producer is librdkafka's (confluent-kafka), the way Flink's and Kafka Streams'
exactly-once sinks write; its aborted batches are purged before they reach the broker (a long
linger.ms), since the local broker would keep a batch it received before an abort (docs/kafka.md).
"""
import random
import signal
import threading
import time

import confluent_kafka

from easyonline.checkpoint.checkpointer import latest_checkpoint
from easyonline.config.loader import to_text
from easyonline.scoring.checkpoint_model import CheckpointModel
from easyonline.updates.model_diff import differences_from_model
from easyonline.updates.param_ids import read_parameter_ids
from easyonline.updates.readers import KafkaUpdateReader
from easyonline.updates.replica import replay
from tests.integration.test_fault_recovery import alive, descendants, read_records, start_trainer
from tests.integration.test_multi_task_models import GROUPS, MMOE, config_for, lines

TRANSACTIONS = 48
PER_TRANSACTION = 100
ABORT_EVERY = 4
RATE = 800  # samples/s


def numbered(start: int, count: int):
    """The multi-task stream (clk,buy,I1..I3,C1..C6) with each sample's number as the last field."""
    return [line + b",n%d" % (start + i) for i, line in enumerate(lines(start, count))]


def write_transactions(bootstrap: str, topic: str, committed: list, killed: threading.Event,
                       done: threading.Event):
    """The transactions, a second half only once the trainer was killed (so the kill falls mid-stream
    however slowly the trainer starts); ``committed``: the numbers of the committed samples."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}",
                                         "compression.type": "zstd", "linger.ms": 1000})
    producer.init_transactions(30)
    for t in range(TRANSACTIONS):
        if t == TRANSACTIONS // 2:
            killed.wait(120)
        chunk = numbered(t * PER_TRANSACTION, PER_TRANSACTION)
        producer.begin_transaction()
        for i, line in enumerate(chunk):
            producer.produce(topic, line, partition=i % 2)
        if (t + 1) % ABORT_EVERY == 0:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed.extend(range(t * PER_TRANSACTION, (t + 1) * PER_TRANSACTION))
        time.sleep(PER_TRANSACTION / RATE)
    done.set()


def write_config(tmp_path, broker, topic, updates):
    config = config_for(MMOE, tmp_path / "model", GROUPS, broker.bootstrap, topic, updates)
    config.data_config.input_fields.add(input_name="number")  # read by the recorder, by no feature
    config.data_config.batch_size = 100
    config.data_config.batch_timeout_ms = 500
    # (7: the first half, about 18 batches of 100, drained, still ends on trained samples)
    config.train_config.save_checkpoints_steps = 7
    config.train_config.incr_save_config.model_name = "model"
    path = tmp_path / "mmoe.config"
    path.write_text(to_text(config))
    return config, path


def test_mmoe_from_a_transactional_compressed_stream_survives_sigkill_with_its_labels_and_updates(
        broker, topic, tmp_path):
    broker.create_topic(topic, 2)
    updates = topic + "_updates"
    config, config_path = write_config(tmp_path, broker, topic, updates)
    committed, killed, written = [], threading.Event(), threading.Event()
    producer = threading.Thread(target=write_transactions,
                                args=(broker.bootstrap, topic, committed, killed, written),
                                daemon=True)
    producer.start()
    records_path = tmp_path / "mmoe.records"
    log = open(tmp_path / "trainer.log", "ab")
    proc = start_trainer(config_path, records_path, log)
    deadline = time.time() + 180

    # the kill: after the run's first checkpoint and at least one batch after it, at a random moment
    while time.time() < deadline:
        records = read_records(records_path) if records_path.exists() else []
        kinds = [r[0] for r in records]
        if "C" in kinds and "T" in kinds[kinds.index("C"):]:
            break
        time.sleep(0.02)
    time.sleep(random.Random(20261126).uniform(0.0, 0.5))
    # ... and not right after a checkpoint (the first half drained and saved would leave nothing to repeat)
    while time.time() < deadline and [r[0] for r in read_records(records_path) if r[0] in "CT"][-1] != "T":
        time.sleep(0.01)
    children = descendants(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with open(records_path, "a") as f:
        f.write("K 0 killed\n")
    killed.set()
    kill_deadline = time.time() + 10
    while time.time() < kill_deadline and any(alive(c) for c in children):
        time.sleep(0.2)
    assert not [c for c in children if alive(c)], "the reader process outlived its SIGKILLed trainer"

    proc = start_trainer(config_path, records_path, log)
    producer.join(120)
    assert written.is_set() and len(committed) == TRANSACTIONS * PER_TRANSACTION * 3 // 4
    while time.time() < deadline:
        trained = {int(item.split(":")[0]) for kind, _, rest in read_records(records_path) if kind == "T"
                   for item in rest}
        if len(trained) >= len(committed):
            break
        time.sleep(0.5)
    time.sleep(1)  # a batch of an aborted transaction, had one been read, would show now
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(120) == 0, open(tmp_path / "trainer.log").read()[-3000:]

    records = read_records(records_path)
    starts = [rest for kind, _, rest in records if kind == "S"]
    assert len(starts) == 2 and "None" not in starts[1][0], starts  # the restart restored a checkpoint
    counts, labels_of, allowed, since_checkpoint = {}, {}, set(), set()
    for kind, _, rest in records:
        if kind in ("S", "C"):
            since_checkpoint = set()
        elif kind == "T":
            for item in rest:
                number, _, labels = item.split(":")
                n = int(number)
                counts[n] = counts.get(n, 0) + 1
                labels_of.setdefault(n, set()).add(labels)
                since_checkpoint.add(n)
        elif kind == "K":
            allowed |= since_checkpoint
    assert sorted(counts) == sorted(committed)  # each committed sample trained, no aborted one
    repeated = {n for n, c in counts.items() if c > 1}
    assert repeated <= allowed, sorted(repeated - allowed)[:20]
    assert repeated, "the kill fell on a checkpoint: no sample was left to train again"
    # each sample's clk/buy as written, through the parser to the tasks
    expected = {n: "/".join(v.decode() for v in pair) for n, pair in
                ((n, numbered(n, 1)[0].split(b",")[:2]) for n in committed)}
    wrong = {n: labels_of[n] for n in committed if labels_of[n] != {expected[n]}}
    assert not wrong, list(wrong.items())[:10]
    assert any(v.endswith("/1") for v in expected.values()) and any(v.startswith("0/") for v in expected.values())

    # the updates published across the crash replay into the final checkpoint
    reader = KafkaUpdateReader(broker.bootstrap, updates)
    published = reader.read_available()
    reader.close()
    replica = replay(published, "model")
    model = CheckpointModel(config)
    model.restore(latest_checkpoint(str(tmp_path / "model")))
    assert [t.name for t in model.model.tasks] == ["ctr", "cvr"]
    assert differences_from_model(replica, model.model, read_parameter_ids(str(tmp_path / "model"))) == []
