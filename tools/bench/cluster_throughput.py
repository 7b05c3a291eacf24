"""Benchmark: samples/s of a single process, a 1 ps x 1 worker and a 2 ps x 2 worker cluster on the same stream.

All three train DeepFM from samples/online.config offline (to the end of the
topic) from the same pre-filled topic on one local broker, one after the
other in the same run; ratios are against the single process. For the
clusters, the chief's time split says where a step's time goes: the step on
the workers and ps (the remote part, RPCs included), the chief waiting for
input (reading and parsing run ahead on its prefetch thread), and the rest
of the chief's work (metrics, callbacks, checkpoints).

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

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, ROOT)


def summary_of(output: str) -> dict:
    text = output.split("training summary", 1)[1]
    rate = float(re.search(r"samples/s\s+(\d+)", text).group(1))
    samples = int(re.search(r"samples\s+(\d+)", text).group(1))
    auc = re.search(r"window AUC\s+([\d.]+)", text)
    split = re.search(r"time split: steps on workers/ps ([\d.]+)s \((\d+)%\), chief waiting for input ([\d.]+)s "
                      r"\((\d+)%\), chief other work ([\d.]+)s \((\d+)%\)", output)
    result = {"samples": samples, "samples_per_sec": rate, "auc": float(auc.group(1)) if auc else None}
    if split:
        result.update(remote_share=int(split.group(2)) / 100, input_wait_share=int(split.group(4)) / 100,
                      chief_other_share=int(split.group(6)) / 100)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=60000)
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
        for name, ps, workers in (("single", 0, 0), ("1ps_x_1worker", 1, 1), ("2ps_x_2workers", 2, 2)):
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
                with LocalCluster(ps, workers, [f"--config={path}"], env=env) as cluster:
                    code = cluster.wait(1800)
                output = cluster.chief_output()
            if code != 0:
                raise SystemExit(f"{name} failed ({code}):\n{output[-3000:]}")
            results[name] = dict(summary_of(output), wall_seconds=round(time.time() - started, 1))
    base = results["single"]["samples_per_sec"]
    for result in results.values():
        result["ratio_to_single"] = round(result["samples_per_sec"] / base, 3)
    print(json.dumps({"samples": args.samples, "results": results}, indent=1))
    print(f"\n{'run':<16}{'samples/s':>11}{'ratio':>8}{'AUC':>8}{'remote':>8}{'input':>8}{'chief':>8}{'wall s':>8}")
    for name, r in results.items():
        share = lambda key: f"{r[key]:.0%}" if key in r else "-"
        print(f"{name:<16}{r['samples_per_sec']:>11.0f}{r['ratio_to_single']:>8.3f}{r['auc'] or 0:>8.4f}"
              f"{share('remote_share'):>8}{share('input_wait_share'):>8}{share('chief_other_share'):>8}"
              f"{r['wall_seconds']:>8}")


if __name__ == "__main__":
    main()
