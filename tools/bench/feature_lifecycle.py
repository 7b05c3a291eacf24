"""Benchmark: admission + eviction on a stream of >= 2 million distinct Zipf-distributed ids.

DeepFM, 26 categorical fields sharing one table (so the 200k-row cap binds),
13 numeric fields, dim 16, batch 1024. Two runs on the same samples, each in
its own child process (so RSS is its own): without policies, and with
count-filter admission (min_count 2) plus eviction (decay 0.98, max_size
200000) shrinking every 50 batches. Prints
table size and process RSS over time, samples/s of both and their ratio, and
the prequential AUC of both, as JSON and a table.

    .venv/bin/python tools/bench/feature_lifecycle.py [--samples 1000000]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import easyonline  # noqa: E402,F401
from easyonline.config import load_pipeline_config  # noqa: E402
from easyonline.config.validate import validate_pipeline_config  # noqa: E402
from easyonline.inputs.raw_batch import BatchSource, RawBatch  # noqa: E402
from easyonline.core.callbacks import Callback  # noqa: E402
from easyonline.jobs.online_train import build_trainer  # noqa: E402
from easyonline.utils.logs import setup_logging  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
INFORMATIVE_IDS = 50000


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def zipf_lines(samples: int, zipf_a: float, seed: int = 11):
    """CSV lines: label, 13 numerics, 26 Zipf ids; labels depend on the frequent ids and the numerics."""
    rng = np.random.default_rng(seed)
    ids = rng.zipf(zipf_a, size=(samples, 26)) - 1
    weights = rng.normal(0, 0.8, size=(26, INFORMATIVE_IDS))
    weights[13:] = 0
    numerics = np.round(rng.normal(0, 1, size=(samples, 13)), 3)
    in_range = ids < INFORMATIVE_IDS
    logits = -1.0 + (np.where(in_range, weights[np.arange(26)[None, :], np.where(in_range, ids, 0)], 0)).sum(1)
    logits += numerics @ rng.normal(0, 0.4, size=13)
    labels = (rng.random(samples) < 1 / (1 + np.exp(-logits))).astype(int)
    distinct = sum(len(np.unique(ids[:, j])) for j in range(26))
    lines = []
    for i in range(samples):
        lines.append((f"{labels[i]}," + ",".join(f"{v:g}" for v in numerics[i]) + "," +
                      ",".join(f"{j}_{ids[i, j]:x}" for j in range(26))).encode())
    return lines, distinct


class MemorySource(BatchSource):
    def __init__(self, lines, batch_size):
        self._lines, self._batch, self._i = lines, batch_size, 0

    @property
    def exhausted(self):
        return self._i >= len(self._lines)

    def next_batch(self, timeout):
        if self._i >= len(self._lines):
            return None
        chunk = self._lines[self._i:self._i + self._batch]
        self._i += len(chunk)
        return RawBatch(chunk, {0: self._i}, lag=len(self._lines) - self._i, messages=len(chunk))


class Recorder(Callback):
    def __init__(self, shrink_every: int, policies: bool):
        self.shrink_every, self.policies = shrink_every, policies
        self.batches, self.samples, self.timeline = 0, 0, []
        self.start = None

    def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
        if self.start is None:
            self.start = time.perf_counter()
        self.batches += 1
        self.samples += parsed_batch.size
        if self.policies and self.batches % self.shrink_every == 0:
            trainer.shrink()
        if self.batches % self.shrink_every == 0:
            self.timeline.append({"samples": self.samples, "table_rows": sum(trainer.table_sizes().values()),
                                  "rss_mb": round(rss_mb())})
        self.end = time.perf_counter()


def run(work, lines, policies: bool, cap: int):
    config = load_pipeline_config(os.path.join(ROOT, "samples", "online.config"))
    config.model_dir = os.path.join(work, "policies" if policies else "plain")
    config.ClearField("kafka_train_input")
    config.file_train_input.paths.append("memory")
    config.train_config.save_checkpoints_secs = 0
    config.train_config.log_step_count_secs = 30
    for feature in config.feature_configs:
        if feature.feature_type == feature.IdFeature:
            feature.embedding_name = "shared"
            if policies:
                feature.admission.count_filter.min_count = 2
                feature.eviction.show_click_decay_rate = 0.98
                feature.eviction.max_size = cap
    validate_pipeline_config(config)
    recorder = Recorder(50, policies)
    trainer = build_trainer(config, online=False, source=MemorySource(lines, 1024), callbacks=[recorder])
    summary = trainer.run()
    return {"samples_per_sec": round(recorder.samples / (recorder.end - recorder.start)),
            "prequential_auc": round(summary.auc, 4), "final_table_rows": sum(summary.table_sizes.values()),
            "evicted_rows": int(sum(len(k) for k in trainer.evicted.values())), "timeline": recorder.timeline}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=1000000)
    parser.add_argument("--zipf_a", type=float, default=1.2)
    parser.add_argument("--cap", type=int, default=200000)
    parser.add_argument("--variant", choices=["plain", "policies"], help="run one variant here (used by the parent)")
    args = parser.parse_args()
    setup_logging("WARNING")
    if args.variant:
        lines, distinct = zipf_lines(args.samples, args.zipf_a)
        result = run(tempfile.mkdtemp(prefix="easyonline-lifecycle-"), lines, args.variant == "policies", args.cap)
        result["distinct_keys"] = distinct
        print("RESULT " + json.dumps(result))
        return
    runs = {}
    for variant in ("plain", "policies"):
        out = subprocess.run([sys.executable, os.path.abspath(__file__), f"--variant={variant}",
                              f"--samples={args.samples}", f"--zipf_a={args.zipf_a}", f"--cap={args.cap}"],
                             capture_output=True, text=True, check=True).stdout
        runs[variant] = json.loads(next(l for l in out.splitlines() if l.startswith("RESULT "))[7:])
    plain, policies = runs["plain"], runs["policies"]
    distinct = plain["distinct_keys"]
    result = {"samples": args.samples, "distinct_keys": distinct, "zipf_a": args.zipf_a, "max_size": args.cap,
              "plain": plain, "policies": policies,
              "ratio_policies_to_plain": round(policies["samples_per_sec"] / plain["samples_per_sec"], 3)}
    print(json.dumps(result))
    print()
    print(f"distinct keys in the stream: {distinct}   cap: {args.cap} rows")
    print(f"{'samples':>9} {'rows plain':>11} {'rows policies':>14} {'RSS MB plain':>13} {'RSS MB policies':>16}")
    step = max(len(plain["timeline"]) // 10, 1)
    for a, b in list(zip(plain["timeline"], policies["timeline"]))[step - 1::step]:
        print(f"{a['samples']:>9} {a['table_rows']:>11} {b['table_rows']:>14} {a['rss_mb']:>13} {b['rss_mb']:>16}")
    print(f"samples/s: plain {plain['samples_per_sec']}, policies {policies['samples_per_sec']} "
          f"(ratio {result['ratio_policies_to_plain']})")
    print(f"prequential AUC: plain {plain['prequential_auc']}, policies {policies['prequential_auc']}")


if __name__ == "__main__":
    main()
