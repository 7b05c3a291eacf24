"""Benchmark: what Apache Kafka costs against the local tansu broker and against memory, in one run.

1. Training samples/s of samples/online.config (DeepFM, 26 + 13 fields,
   batch 1024) over the same samples: from arrays in memory (the ceiling),
   from tansu, and from a three-broker Apache Kafka cluster (the topic
   replicated on all three; each JVM with a 1 GB heap, G1 and the full JIT,
   as production brokers run, where the tests' take 256 MB and the JIT's
   first tier for a quicker start), runs rotating memory, tansu, Kafka, ...,
   memory, each broker run compared with the memory runs on either side
   (easyonline/utils/alternating_runs.py), each timed as online_throughput.py
   times its runs (easyonline/tools/throughput.py).
2. Freshness (sample produced -> served prediction changed) p50/p99 and the
   publishing cost (a trained batch -> the acknowledgement of the update
   carrying it): tools/bench/serving_freshness.py run as a script, on tansu
   and on the three-broker cluster (update topic: replication 3,
   min.insync.replicas 2, acks=all), one after the other.

Prints JSON and a table; asserts every run trained every sample and every
fresh id became visible.

    .venv/bin/python tools/bench/apache_kafka_costs.py [--samples 200000] [--rounds 2] [--ids 30]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import easyonline  # noqa: E402,F401
from easyonline.config import load_pipeline_config  # noqa: E402
from easyonline.tools.apache_kafka import ApacheKafka  # noqa: E402
from easyonline.tools.local_broker import LocalBroker  # noqa: E402
from easyonline.tools.sample_configs import sample_config  # noqa: E402
from easyonline.tools.stream_producer import SyntheticCtrStream, produce  # noqa: E402
from easyonline.tools.throughput import from_broker, from_memory, throughput_config  # noqa: E402
from easyonline.utils.alternating_runs import neighbour_ratios  # noqa: E402
from easyonline.utils.logs import setup_logging  # noqa: E402

BATCH_SIZE = 1024  # samples/online.config's
FRESHNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "serving_freshness.py")


def config_for(work: str, name: str, server: str = "", topic: str = ""):
    """samples/online.config for one timed run into a fresh directory (as online_throughput.py's runs)."""
    return throughput_config(load_pipeline_config(sample_config("online.config")),
                             os.path.join(work, f"{name}_{time.time()}"), server, topic, "CONFLUENT_KAFKA")


def throughput(samples: int, rounds: int) -> dict:
    work = tempfile.mkdtemp(prefix="easyonline-kafka-costs-")
    samples = -(-samples // BATCH_SIZE) * BATCH_SIZE  # whole batches (see online_throughput.py)
    lines = SyntheticCtrStream().lines(0, samples)
    with LocalBroker() as tansu, ApacheKafka(3, heap_mb=1024, quick_start=False) as kafka:
        brokers = {"tansu": tansu, "apache_kafka": kafka}
        for broker in brokers.values():
            broker.create_topic("bench", 2)
            produce(broker.bootstrap, "bench", [lines], partitions=2)
        memory = [from_memory(config_for(work, "memory"), lines, BATCH_SIZE)]
        rates = {name: [] for name in brokers}
        for _ in range(rounds):
            for name, broker in brokers.items():
                rate, _, summary, _ = from_broker(config_for(work, "broker", broker.bootstrap, "bench"))
                assert summary.samples == samples, (name, summary.samples, samples)
                rates[name].append(rate)
            memory.append(from_memory(config_for(work, "memory"), lines, BATCH_SIZE))
        started_secs = kafka.started_secs
    result = {"samples": samples, "memory_runs": [round(r) for r in memory],
              "memory_samples_per_sec": round(statistics.median(memory)),
              "apache_kafka_start_secs": round(started_secs, 1)}
    for name, runs in rates.items():
        result[f"{name}_runs"] = [round(r) for r in runs]
        result[f"{name}_samples_per_sec"] = round(statistics.median(runs))
        result[f"{name}_to_memory"] = round(statistics.median(neighbour_ratios(memory, runs)), 3)
    result["apache_kafka_to_tansu"] = round(statistics.median(
        [k / t for k, t in zip(rates["apache_kafka"], rates["tansu"])]), 3)
    return result


def freshness(ids: int) -> dict:
    out = {}
    for broker in ("local", "apache_kafka"):
        proc = subprocess.run([sys.executable, FRESHNESS, f"--ids={ids}", "--latency_requests=150",
                               f"--broker={broker}"], capture_output=True, text=True, check=False)
        printed = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not printed:
            raise SystemExit(f"serving_freshness.py --broker={broker} exited {proc.returncode}: {proc.stderr[-2000:]}")
        result = json.loads(printed[0])
        assert result["never_changed"] == 0, (broker, result)
        out[broker] = {"freshness_secs": result["freshness_secs"],
                       "publish_ack_secs": result["stages_secs"].get("trained -> published (acked)"),
                       "predict_batch_1_secs": result["predict_latency_secs"]["batch_1"]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=200000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ids", type=int, default=30)
    args = parser.parse_args()
    setup_logging("WARNING")
    result = {"throughput": throughput(args.samples, args.rounds), "freshness": freshness(args.ids)}
    print(json.dumps(result))
    t = result["throughput"]
    print()
    print(f"{'source':<14}{'samples/s':>11}{'/ memory':>10}   runs")
    print(f"{'memory':<14}{t['memory_samples_per_sec']:>11}{'':>10}   {t['memory_runs']}")
    for name in ("tansu", "apache_kafka"):
        print(f"{name:<14}{t[name + '_samples_per_sec']:>11}{t[name + '_to_memory']:>10.3f}   {t[name + '_runs']}")
    print(f"Apache Kafka / tansu, same round: {t['apache_kafka_to_tansu']:.3f}; three brokers started in "
          f"{t['apache_kafka_start_secs']} s")
    print()
    print(f"{'broker':<14}{'fresh p50 s':>12}{'fresh p99 s':>12}{'ack p50 s':>11}{'ack p99 s':>11}")
    for name, f in result["freshness"].items():
        ack = f["publish_ack_secs"] or {"p50": float("nan"), "p99": float("nan")}
        print(f"{name:<14}{f['freshness_secs']['p50']:>12.3f}{f['freshness_secs']['p99']:>12.3f}"
              f"{ack['p50']:>11.3f}{ack['p99']:>11.3f}")


if __name__ == "__main__":
    main()
