"""Benchmark: training samples/s with incremental publishing on and off, in the same run.

DeepFM from samples/online.config, trained from the local broker. Runs
alternate off / on / off / ... / off on fresh models over the same samples
(easyonline/utils/alternating_runs.py: each "on" run against the "off" runs on
either side of it, the median of those ratios); "on" publishes to a second
topic on the same broker with sparse_save_secs=1 (--sparse_save_secs) and
dense_save_secs=10. Reports the ratio on/off (target >= 0.95), bytes
published per second, and the delay from a batch being trained to the
acknowledgement of the update that carries it (p50/p99).

    .venv/bin/python tools/bench/incremental_publish.py [--samples 200000] [--rounds 3]
"""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import easyonline  # noqa: E402,F401
from easyonline.tools.local_broker import LocalBroker  # noqa: E402
from easyonline.tools.stream_producer import SyntheticCtrStream, produce  # noqa: E402
from easyonline.core.callbacks import Callback  # noqa: E402
from easyonline.jobs.online_train import build_trainer  # noqa: E402
from easyonline.utils.logs import setup_logging  # noqa: E402
from easyonline.config import load_pipeline_config  # noqa: E402
from easyonline.tools.sample_configs import sample_config  # noqa: E402
from easyonline.tools.throughput import Timer, throughput_config  # noqa: E402
from easyonline.utils.alternating_runs import alternate  # noqa: E402


class PublishDelays(Callback):
    """Per batch: time from its training to the acknowledgement of the first update at or after its step.

    Batches carried by the final update (sent after the closing checkpoint)
    are timed separately: their wait includes the checkpoint save.
    """

    def __init__(self):
        self.batch_times = {}
        self.delays, self.final_delays = [], []
        self.results = []
        self.checkpoint_time = float("inf")  # the bench saves only the closing checkpoint

    def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
        self.batch_times[trainer.step] = time.time()

    def on_checkpoint(self, trainer, path):
        self.checkpoint_time = time.time()

    def on_publish(self, trainer, result):
        self.results.append(result)
        into = self.final_delays if result.create_time >= self.checkpoint_time else self.delays
        for step in [s for s in self.batch_times if s <= result.step]:
            into.append(result.acked_time - self.batch_times.pop(step))


def run_once(work, broker, topic, publish, index, sparse_save_secs=1.0, caught_up_secs=0.0):
    config = throughput_config(load_pipeline_config(sample_config("online.config")),
                               os.path.join(work, f"run_{index}"), broker.bootstrap, topic, "CONFLUENT_KAFKA")
    delays = PublishDelays()
    config.train_config.ClearField("incr_save_config")  # the sample config publishes; "off" must not
    if publish:
        incr = config.train_config.incr_save_config
        incr.sparse_save_secs, incr.dense_save_secs = sparse_save_secs, 10
        incr.sparse_save_secs_caught_up = caught_up_secs
        incr.kafka.server, incr.kafka.topic = broker.bootstrap, f"updates_{index}"
    timer = Timer()
    trainer = build_trainer(config, online=False, callbacks=[timer, delays])
    started = time.time()
    summary = trainer.run()
    seconds = time.time() - started
    published = sum(r.bytes for r in delays.results)
    return {"rate": timer.rate(), "seconds": seconds, "samples": summary.samples, "bytes": published,
            "updates": len(delays.results), "rows": sum(r.rows for r in delays.results),
            "train_seconds": timer.end - timer.start, "delays": delays.delays, "final_delays": delays.final_delays}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=200000)
    parser.add_argument("--rounds", type=int, default=3, help="publishing runs, each between two runs without")
    parser.add_argument("--sparse_save_secs", type=float, default=1.0, help="how often changed rows are published")
    parser.add_argument("--sparse_save_secs_caught_up", type=float, default=0.0,
                        help="how often while the trainer has caught up (0: off)")
    args = parser.parse_args()
    setup_logging("WARNING")
    work = tempfile.mkdtemp(prefix="easyonline-bench-")
    runs = {"off": [], "on": []}
    with LocalBroker() as broker:
        broker.create_topic("bench", 2)
        produce(broker.bootstrap, "bench", SyntheticCtrStream().chunks(0, args.samples), partitions=2)

        def run(mode: str) -> float:
            runs[mode].append(run_once(work, broker, "bench", mode == "on", sum(map(len, runs.values())),
                                       args.sparse_save_secs, args.sparse_save_secs_caught_up))
            return runs[mode][-1]["rate"]

        _, _, ratios = alternate(lambda: run("off"), lambda: run("on"), args.rounds)
    off = float(np.median([r["rate"] for r in runs["off"]]))
    on = float(np.median([r["rate"] for r in runs["on"]]))
    ratio = float(np.median(ratios))
    delays = np.concatenate([r["delays"] for r in runs["on"]])
    final = np.concatenate([r["final_delays"] for r in runs["on"]])
    bytes_per_sec = float(np.mean([r["bytes"] / r["seconds"] for r in runs["on"]]))
    result = {
        "model": "deepfm", "samples": args.samples, "rounds": args.rounds, "sparse_save_secs": args.sparse_save_secs,
        "sparse_save_secs_caught_up": args.sparse_save_secs_caught_up,
        "dense_save_secs": 10, "off_samples_per_sec": round(off), "on_samples_per_sec": round(on),
        "off_runs": [round(r["rate"]) for r in runs["off"]], "on_runs": [round(r["rate"]) for r in runs["on"]],
        "ratio_on_to_off": round(ratio, 3), "ratios": [round(r, 3) for r in ratios], "published_bytes_per_sec": round(bytes_per_sec),
        "updates_per_run": [r["updates"] for r in runs["on"]], "rows_per_run": [r["rows"] for r in runs["on"]],
        "delay_p50_secs": round(float(np.percentile(delays, 50)), 3),
        "delay_p99_secs": round(float(np.percentile(delays, 99)), 3), "delay_batches": int(len(delays)),
        "final_update_delay_p50_secs": round(float(np.percentile(final, 50)), 3) if len(final) else None,
        "targets": {"ratio_at_least": 0.95, "met": ratio >= 0.95},
    }
    print(json.dumps(result))
    print()
    print(f"{'publishing':<12} {'samples/s (median)':>18}  runs")
    print(f"{'off':<12} {off:>18.0f}  {result['off_runs']}")
    print(f"{'on':<12} {on:>18.0f}  {result['on_runs']}")
    print(f"ratio on/off (median of {len(ratios)}: {', '.join(f'{r:.3f}' for r in ratios)}): {ratio:.3f} "
          f"(target >= 0.95: {'met' if ratio >= 0.95 else 'MISSED'})")
    print(f"published: {bytes_per_sec / 1e6:.2f} MB/s, {np.mean(result['updates_per_run']):.0f} updates per run")
    print(f"trained -> on the topic: p50 {result['delay_p50_secs']:.3f} s, p99 {result['delay_p99_secs']:.3f} s "
          f"over {len(delays)} batches (while training)")
    if len(final):
        print(f"batches in the final update (after the closing checkpoint): p50 {np.percentile(final, 50):.3f} s")


if __name__ == "__main__":
    main()
