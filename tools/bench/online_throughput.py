"""Benchmark: samples/s of online training from the broker vs from in-memory arrays, same run.

DeepFM, 26 categorical + 13 numeric fields, embedding dim 16, batch 1024
(samples/online.config). The same samples are first trained from tensors
already in memory (the ceiling: only the training step), then streamed
through the local broker and trained by OnlineTrainer (Kafka polling,
CSV parsing, training, status, checkpoint at the end), each on a fresh model.
Prints JSON and a table; the ratio is broker / memory.

    .venv/bin/python tools/bench/online_throughput.py [--samples 300000] [--lines_per_message 1]
"""
import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import easyonline  # noqa: E402,F401
from easyonline.config import load_pipeline_config, validate_pipeline_config  # noqa: E402
from easyonline.tools.local_broker import LocalBroker  # noqa: E402
from easyonline.tools.stream_producer import SyntheticCtrStream, produce  # noqa: E402
from easyonline.train.callbacks import Callback  # noqa: E402
from easyonline.train.trainer import OnlineTrainer  # noqa: E402
from easyonline.utils.logs import setup_logging  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
WARMUP_BATCHES = 5


class Timer(Callback):
    """Times batches after the warm-up ones (the first includes tracing the step)."""

    def __init__(self):
        self.batches = 0
        self.samples = 0
        self.start = self.end = None

    def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
        self.batches += 1
        if self.batches == WARMUP_BATCHES:
            self.start = time.perf_counter()
        elif self.batches > WARMUP_BATCHES:
            self.samples += parsed_batch.size
            self.end = time.perf_counter()

    def rate(self):
        return self.samples / (self.end - self.start)


def config_for(model_dir, server="", topic=""):
    config = load_pipeline_config(os.path.join(ROOT, "samples", "online.config"))
    config.model_dir = model_dir
    config.train_config.log_step_count_secs = 5
    config.train_config.save_checkpoints_secs = 0
    if server:
        config.kafka_train_input.server, config.kafka_train_input.topic = server, topic
    validate_pipeline_config(config, online=False)
    return config


def from_memory(work, lines, batch_size):
    trainer = OnlineTrainer(config_for(os.path.join(work, f"memory_{time.time()}")), online=False)
    batches = [trainer.parser.parse(lines[i:i + batch_size]) for i in range(0, len(lines), batch_size)]
    timer = Timer()
    for parsed in batches:
        probs = trainer.train_batch(parsed.features, parsed.labels)
        trainer.metrics.update(parsed.labels.numpy(), probs)
        timer.on_batch_end(trainer, None, parsed, probs)
    return timer.rate()


def from_broker(work, broker, topic):
    timer = Timer()
    trainer = OnlineTrainer(config_for(os.path.join(work, f"broker_{time.time()}"), broker.bootstrap, topic),
                            online=False, callbacks=[timer])
    summary = trainer.run()
    print(f"broker run: waited for input {trainer.input_wait_seconds:.1f}s of {summary.seconds:.1f}s")
    return timer.rate(), summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=300000)
    parser.add_argument("--lines_per_message", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args()
    setup_logging("WARNING")
    work = tempfile.mkdtemp(prefix="easyonline-bench-")
    lines = SyntheticCtrStream().lines(0, args.samples)
    with LocalBroker() as broker:
        broker.create_topic("bench", args.partitions)
        produce(broker.bootstrap, "bench", [lines], lines_per_message=args.lines_per_message,
                partitions=args.partitions)
        memory_1 = from_memory(work, lines, 1024)
        broker_rate, summary = from_broker(work, broker, "bench")
        memory_2 = from_memory(work, lines, 1024)
    memory_rate = (memory_1 + memory_2) / 2
    result = {
        "model": "deepfm", "categorical_fields": 26, "numeric_fields": 13, "embedding_dim": 16, "batch_size": 1024,
        "samples": args.samples, "lines_per_message": args.lines_per_message, "partitions": args.partitions,
        "memory_samples_per_sec": round(memory_rate), "memory_runs": [round(memory_1), round(memory_2)],
        "broker_samples_per_sec": round(broker_rate), "ratio_broker_to_memory": round(broker_rate / memory_rate, 3),
        "broker_run_samples": summary.samples, "broker_run_auc": round(summary.auc, 4),
        "targets": {"ratio_at_least": 0.85, "broker_samples_per_sec_at_least": 10000},
    }
    print(json.dumps(result))
    print()
    print(f"{'source':<10} {'samples/s':>10}")
    print(f"{'memory':<10} {memory_rate:>10.0f}   (runs: {memory_1:.0f}, {memory_2:.0f})")
    print(f"{'broker':<10} {broker_rate:>10.0f}")
    print(f"ratio broker/memory: {broker_rate / memory_rate:.3f} (target >= 0.85); "
          f"broker >= 10000/s: {'yes' if broker_rate >= 10000 else 'NO'}")


if __name__ == "__main__":
    main()
