"""Benchmark: an offline run on a topic written in Kafka transactions, with aborts, read by each client.

A confluent-kafka (librdkafka) transactional producer writes ``--transactions`` transactions of
``--per_transaction`` synthetic samples over ``--partitions`` partitions (``--codec`` compressed), aborting
every ``--abort_every``-th, as Flink's and Kafka Streams' exactly-once sinks do. Then
``python -m easyonline.train``'s offline run (``build_trainer(config, online=False)`` on
samples/online.config) trains the topic once with each client. It asserts, for each, that the trained
count equals the committed count and that the run ended by itself (caught up), not by the backstop
(``--timeout``), and prints JSON and a table.

``--send_before_abort`` flushes each transaction's records to the broker before aborting it (a large
or slow transaction: its batches reach the log before the abort). A real Kafka keeps them and lists
them as aborted in every fetch response, and read_committed readers skip them. The local broker keeps
them but does not list them, so every reader trains them: the bench then reports how many aborted
samples were trained ("aborted_trained") and checks trained == committed + that count, which tells
the local broker's behaviour apart from a reader's double count. ``--broker apache_kafka`` runs it on
Apache Kafka itself (one broker started here), where trained == committed with or without
``--send_before_abort``.

    .venv/bin/python tools/bench/transactional_stream.py [--transactions 40] [--per_transaction 1000]
"""
import argparse
import json
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import confluent_kafka  # noqa: E402

from easyonline.config import load_pipeline_config  # noqa: E402
from easyonline.jobs.online_train import build_trainer  # noqa: E402
from easyonline.protos import pipeline_pb2  # noqa: E402
from easyonline.tools.apache_kafka import ApacheKafka  # noqa: E402
from easyonline.tools.local_broker import LocalBroker  # noqa: E402
from easyonline.tools.stream_producer import SyntheticCtrStream  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CAUGHT_UP = "caught up with the topic (offline run)"


def write_transactions(bootstrap: str, topic: str, args) -> int:
    """Writes the stream; returns the number of committed samples."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{topic}",
                                         "compression.type": args.codec, "linger.ms": 5})
    producer.init_transactions(30)
    stream = SyntheticCtrStream()
    committed = 0
    for t in range(args.transactions):
        lines = stream.lines(t * args.per_transaction, args.per_transaction)
        producer.begin_transaction()
        for i, line in enumerate(lines):
            producer.produce(topic, line, partition=i % args.partitions)
        if (t + 1) % args.abort_every == 0:
            if args.send_before_abort:
                assert producer.flush(30) == 0
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed += len(lines)
    return committed


def train_offline(bootstrap: str, topic: str, client: str, model_dir: str, timeout: float) -> dict:
    config = load_pipeline_config(os.path.join(ROOT, "samples", "online.config"))
    config.model_dir = model_dir
    config.train_config.ClearField("incr_save_config")
    config.train_config.save_checkpoints_secs = 0
    config.kafka_train_input.server = bootstrap
    config.kafka_train_input.topic = topic
    config.kafka_train_input.client = pipeline_pb2.KafkaInput.Client.Value(client)
    trainer = build_trainer(config, online=False)
    backstop = threading.Timer(timeout, trainer.stop, args=("backstop: did not end by itself",))
    backstop.start()
    started = time.time()
    try:
        summary = trainer.run()
    finally:
        backstop.cancel()
    return {"client": client, "trained": summary.samples, "seconds": round(time.time() - started, 1),
            "stop_reason": summary.stop_reason, "positions": summary.positions,
            "ended_by_itself": summary.stop_reason == CAUGHT_UP}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transactions", type=int, default=40, help="transactions written")
    parser.add_argument("--per_transaction", type=int, default=1000, help="samples per transaction")
    parser.add_argument("--abort_every", type=int, default=4, help="every n-th transaction is aborted")
    parser.add_argument("--partitions", type=int, default=2, help="partitions of the topic")
    parser.add_argument("--codec", default="lz4", help="producer compression.type (none, gzip, lz4, zstd, ...)")
    parser.add_argument("--clients", default="CONFLUENT_KAFKA,KAFKA_PYTHON", help="data clients to train with")
    parser.add_argument("--timeout", type=float, default=600, help="backstop seconds per run")
    parser.add_argument("--send_before_abort", action="store_true",
                        help="flush aborted transactions' records to the broker before the abort (see above)")
    parser.add_argument("--broker", default="local", choices=["local", "apache_kafka"],
                        help="the local tansu broker, or Apache Kafka itself")
    args = parser.parse_args()
    results = []
    real_kafka = args.broker == "apache_kafka"
    with (ApacheKafka(1) if real_kafka else LocalBroker()) as broker, tempfile.TemporaryDirectory() as work:
        topic = "transactional"
        broker.create_topic(topic, args.partitions)
        committed = write_transactions(broker.bootstrap, topic, args)
        aborted = args.transactions // args.abort_every * args.per_transaction
        expected = committed + (aborted if args.send_before_abort and not real_kafka else 0)
        for client in args.clients.split(","):
            results.append(train_offline(broker.bootstrap, topic, client, os.path.join(work, client), args.timeout))
    report = {"broker": args.broker, "transactions": args.transactions, "per_transaction": args.per_transaction,
              "abort_every": args.abort_every, "codec": args.codec, "committed": committed,
              "send_before_abort": args.send_before_abort,
              "aborted_trained": [r["trained"] - committed for r in results], "runs": results}
    print(json.dumps(report))
    print(f"\n{'client':<16} {'committed':>10} {'trained':>10} {'seconds':>8}  ended by itself  positions")
    for r in results:
        print(f"{r['client']:<16} {committed:>10} {r['trained']:>10} {r['seconds']:>8}  "
              f"{'yes' if r['ended_by_itself'] else 'NO: ' + r['stop_reason']:<15}  {r['positions']}")
    failed = [r["client"] for r in results if r["trained"] != expected or not r["ended_by_itself"]]
    if failed:
        print(f"FAILED: {failed}: trained != {expected} or the run did not end by itself")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
