"""Benchmark: reading a sample topic with each Kafka client, side by side in one run.

Which client should read the training stream? The same topic (CSV samples, one per message, on the local
broker) is read to the end by:

* kafka-python as pinned (requirements.txt), stock;
* the same with easyonline's fast record decoder (``fast_records.install``; ``client: KAFKA_PYTHON``);
* confluent-kafka (librdkafka; EasyRec's data client and the default), ``Consumer.consume`` in batches;
* another kafka-python, stock and with the fast decoder, when ``--other_kafka_python`` names an
  interpreter that has it (``python3.11 -m venv /tmp/kp2 && /tmp/kp2/bin/pip install -r requirements.txt
  'kafka-python==2.0.2'``).

Each reader runs in its own process, one after the other, and reports wall time and its process CPU
(librdkafka's threads included) per sample; the table's ratios are against the pinned fast path.

    .venv/bin/python tools/bench/kafka_clients.py [--samples 300000] [--other_kafka_python /tmp/kp2/bin/python]
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from easyonline.tools.local_broker import LocalBroker  # noqa: E402
from easyonline.tools.stream_producer import SyntheticCtrStream, produce  # noqa: E402

PARTITIONS = 2

READ_KAFKA_PYTHON = r"""
import json, sys, time
from kafka import KafkaConsumer, TopicPartition
bootstrap, topic, count, fast = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "fast"
consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, max_poll_records=10000,
                         fetch_max_bytes=64 * 1024 * 1024, max_partition_fetch_bytes=8 * 1024 * 1024)
if fast:
    from easyonline.inputs import fast_records
    assert fast_records.install(consumer)
partitions = [TopicPartition(topic, p) for p in range(%d)]
consumer.assign(partitions)
consumer.seek_to_beginning()
started, cpu = time.perf_counter(), time.process_time()
got = size = 0
while got < count:
    for records in consumer.poll(timeout_ms=1000).values():
        for record in records:
            size += len(record.value)
            got += 1
print(json.dumps({"samples": got, "bytes": size, "seconds": time.perf_counter() - started,
                  "cpu_seconds": time.process_time() - cpu, "version": __import__("kafka").__version__}))
""" % PARTITIONS

READ_CONFLUENT = r"""
import json, sys, time
import confluent_kafka
bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False})
consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in range(%d)])
started, cpu = time.perf_counter(), time.process_time()
got = size = 0
while got < count:
    for message in consumer.consume(num_messages=10000, timeout=1.0):
        if message.error() is None:
            size += len(message.value())
            got += 1
print(json.dumps({"samples": got, "bytes": size, "seconds": time.perf_counter() - started,
                  "cpu_seconds": time.process_time() - cpu, "version": confluent_kafka.version()}))
consumer.close()
""" % PARTITIONS


def read_with(python: str, script: str, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")}
    proc = subprocess.run([python, "-c", script, *args], capture_output=True, text=True, timeout=600, env=env)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=300000)
    parser.add_argument("--other_kafka_python", default="",
                        help="a Python with another kafka-python version installed, measured too")
    args = parser.parse_args()
    with LocalBroker() as broker:
        broker.create_topic("samples", PARTITIONS)
        produce(broker.bootstrap, "samples", SyntheticCtrStream().chunks(0, args.samples), partitions=PARTITIONS)
        common = (broker.bootstrap, "samples", str(args.samples))
        results = {
            "kafka-python pinned + fast decoder": read_with(sys.executable, READ_KAFKA_PYTHON, *common, "fast"),
            "kafka-python pinned, stock": read_with(sys.executable, READ_KAFKA_PYTHON, *common, "stock"),
            "confluent-kafka": read_with(sys.executable, READ_CONFLUENT, *common),
        }
        if args.other_kafka_python:
            for mode in ("fast", "stock"):
                results[f"other kafka-python, {mode}"] = read_with(args.other_kafka_python, READ_KAFKA_PYTHON,
                                                                   *common, mode)
    for name, result in results.items():
        assert result["samples"] >= args.samples, (name, result)
        result["samples_per_sec"] = result["samples"] / result["seconds"]
        result["cpu_us_per_sample"] = 1e6 * result["cpu_seconds"] / result["samples"]
    base = results["kafka-python pinned + fast decoder"]
    print(json.dumps(results, indent=1))
    print(f"\n{'client':38} {'version':>9} {'samples/s':>11} {'CPU us/sample':>14} {'rate vs fast path':>18}")
    for name, r in results.items():
        print(f"{name:38} {str(r['version']):>9} {r['samples_per_sec']:>11,.0f} {r['cpu_us_per_sample']:>14.2f} "
              f"{r['samples_per_sec'] / base['samples_per_sec']:>18.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
