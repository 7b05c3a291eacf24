"""Benchmark: samples/s of a single process, a 1 ps x 1 trainer and a 2 ps x 2 trainer cluster on the same stream.

All three train DeepFM from samples/online.config offline (to the end of the
topic) from the same pre-filled 2-partition topic on one local broker, one
after the other in the same run; ratios are against the single process. A
cluster's samples/s is the chief's summary: every trainer's samples over the
chief's run (it ends when every trainer has caught up). For the 2-trainer
cluster, ``overlap`` is the share of the time both trainers were running
that both were inside a step at once, from the step spans each trainer
writes (0: they take turns, 1: always together); ``busy`` is each trainer's
share of its run spent inside steps.

    .venv/bin/python tools/bench/cluster_throughput.py [--samples 60000]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, ROOT)


def summary_of(output: str) -> dict:
    text = output.split("training summary", 1)[1]
    rate = float(re.search(r"samples/s\s+(\d+)", text).group(1))
    samples = int(re.search(r"samples\s+(\d+)", text).group(1))
    auc = re.search(r"window AUC\s+([\d.]+)", text)
    return {"samples": samples, "samples_per_sec": rate, "auc": float(auc.group(1)) if auc else None}


def _merge(spans: np.ndarray) -> list:
    merged = []
    for start, end in sorted(map(tuple, spans)):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def _length(intervals) -> float:
    return sum(end - start for start, end in intervals)


def _intersect(a: list, b: list) -> list:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append([start, end])
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def step_overlap(span_files: list) -> dict:
    """Busy share of each trainer, and the share of their common period when all were inside a step."""
    spans = [np.load(f) for f in span_files]
    begin = max(s[:, 0].min() for s in spans)
    end = min(s[:, 1].max() for s in spans)
    merged = [_merge(s) for s in spans]
    both = merged[0]
    for other in merged[1:]:
        both = _intersect(both, other)
    window = [[begin, end]]
    busy = [round(_length(m) / max(s[:, 1].max() - s[:, 0].min(), 1e-9), 3) for m, s in zip(merged, spans)]
    return {"overlap": round(_length(_intersect(both, window)) / max(end - begin, 1e-9), 3), "busy": busy,
            "common_seconds": round(end - begin, 1), "steps": [len(s) for s in spans]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=60000)
    parser.add_argument("--runs", default="single,1ps_x_1trainer,2ps_x_2trainers", help="which runs, comma-separated")
    args = parser.parse_args()
    import easyonline  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    from easyonline.config import load_pipeline_config  # pylint: disable=g-import-not-at-top
    from easyonline.config.loader import to_text  # pylint: disable=g-import-not-at-top
    from easyonline.tools.local_broker import LocalBroker  # pylint: disable=g-import-not-at-top
    from easyonline.tools.local_cluster import LocalCluster  # pylint: disable=g-import-not-at-top
    from easyonline.tools.stream_producer import SyntheticCtrStream, produce  # pylint: disable=g-import-not-at-top
    work = tempfile.mkdtemp(prefix="easyonline-bench-cluster-")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    results = {}
    with LocalBroker() as broker:
        broker.create_topic("bench", 2)
        produce(broker.bootstrap, "bench", SyntheticCtrStream().chunks(0, args.samples), partitions=2)
        runs = (("single", 0, 0), ("1ps_x_1trainer", 1, 1), ("2ps_x_2trainers", 2, 2))
        for name, ps, trainers in [run for run in runs if run[0] in args.runs.split(",")]:
            config = load_pipeline_config(os.path.join(ROOT, "samples", "online.config"))
            config.model_dir = os.path.join(work, name)
            config.kafka_train_input.server = broker.bootstrap
            config.kafka_train_input.topic = "bench"
            config.train_config.ClearField("incr_save_config")
            path = os.path.join(work, name + ".config")
            with open(path, "w") as f:
                f.write(to_text(config))
            started = time.time()
            if not ps:
                proc = subprocess.run([sys.executable, "-m", "easyonline.train", f"--config={path}"], env=env,
                                      capture_output=True, text=True, timeout=1800)
                output, code = proc.stdout + proc.stderr, proc.returncode
            else:
                with LocalCluster(ps, trainers, [f"--config={path}"], env=env) as cluster:
                    code = cluster.wait(1800)
                output = cluster.chief_output()
            if code != 0:
                raise SystemExit(f"{name} failed ({code}):\n{output[-3000:]}")
            results[name] = dict(summary_of(output), wall_seconds=round(time.time() - started, 1))
            if trainers > 1:
                files = [os.path.join(config.model_dir, "train", "step_spans.npy")] + [
                    os.path.join(config.model_dir, f"train_worker{i}", "step_spans.npy") for i in range(trainers - 1)]
                results[name].update(step_overlap(files))
    base = results["single"]["samples_per_sec"]
    for result in results.values():
        result["ratio_to_single"] = round(result["samples_per_sec"] / base, 3)
    print(json.dumps({"samples": args.samples, "results": results}, indent=1))
    print(f"\n{'run':<18}{'samples/s':>11}{'ratio':>8}{'AUC':>8}{'overlap':>9}{'busy':>14}{'wall s':>8}")
    for name, r in results.items():
        overlap = f"{r['overlap']:.0%}" if "overlap" in r else "-"
        busy = "/".join(f"{b:.0%}" for b in r.get("busy", [])) or "-"
        print(f"{name:<18}{r['samples_per_sec']:>11.0f}{r['ratio_to_single']:>8.3f}{r['auc'] or 0:>8.4f}"
              f"{overlap:>9}{busy:>14}{r['wall_seconds']:>8}")


if __name__ == "__main__":
    main()
