"""Benchmark: where the in-memory training step's time goes (issue 53, item 5: profile before cutting).

Builds the trainer of samples/online.config (DeepFM, 26 tables, Adam) the
way ``online_throughput.py``'s memory runs do (``tools/throughput.py``:
lines parsed into the arrays' batches beforehand, ``train_and_count`` per
batch), warms it up, then:

- times --steps steps: samples/s and process CPU microseconds per sample;
- runs --steps more under cProfile: the share of the time inside the traced
  step (``TFE_Py_Execute``) against Python around it;
- runs --steps more under TensorFlow's profiler and sums each op type's
  kernel time from the trace (``.xplane.pb``, read with TensorFlow's own
  proto), leaving out the executor's wrapper events; the shares are of the
  kernels' summed time (they run on several threads, so the sum exceeds
  the wall time).

Prints JSON, then a table of the op types.

Old and new code side by side (issue 53 asks for ratios of alternating runs):
``--baseline_code DIR`` (another checkout, e.g. ``git worktree add /tmp/old <commit>``) times the step of
that checkout and of this one in turn, ``--pairs`` times each in a fresh process (``--time_only --code``),
and prints each pair's ratio and the medians; the step's config is this checkout's for both.

    .venv/bin/python tools/bench/step_profile.py [--steps 30] [--config samples/online.config] [--top 20]
        [--names 40] [--baseline_code DIR --pairs 5 --steps 300]
"""
import argparse
import collections
import cProfile
import glob
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
# The checkout whose easyonline is timed (--code; default this one), chosen before it is imported.
CODE = sys.argv[sys.argv.index("--code") + 1] if "--code" in sys.argv[:-1] else ROOT
sys.path.insert(0, CODE)

import easyonline  # noqa: E402,F401  (sets TF_USE_LEGACY_KERAS first)
from easyonline.config import load_pipeline_config  # noqa: E402
from easyonline.features.csv_parser import ParsedBatch  # noqa: E402
from easyonline.features.vector_csv import VectorCsvParser  # noqa: E402
from easyonline.inputs.raw_batch import RawBatch  # noqa: E402
from easyonline.jobs.online_train import build_trainer  # noqa: E402
from easyonline.tools.stream_producer import SyntheticCtrStream  # noqa: E402
from easyonline.tools.throughput import Timer, throughput_config  # noqa: E402

# The executor's own events, which enclose the kernels' (counted once, by the kernels)
WRAPPERS = ("Process", "Run")


def kernel_ms(xplane_path: str, by_name: bool = False) -> collections.Counter:
    """Milliseconds per op type (``by_name``: per op, as ``name:type``) on the host's CPU, from a profiler trace."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top

    space = xplane_pb2.XSpace()
    with open(xplane_path, "rb") as f:
        space.ParseFromString(f.read())
    out: collections.Counter = collections.Counter()
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                name = names.get(event.metadata_id, "")
                if ":" not in name or name.startswith("$"):
                    continue
                op_type = name.rsplit(":", 1)[1].strip()
                if op_type in WRAPPERS or op_type.startswith("__inference"):
                    continue
                out[name if by_name else op_type] += event.duration_ps / 1e9
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="steps timed, profiled and traced (each)")
    parser.add_argument("--config", default=os.path.join(ROOT, "samples", "online.config"))
    parser.add_argument("--top", type=int, default=20, help="op types in the table")
    parser.add_argument("--names", type=int, default=0, help="also list this many single ops (name:type), slowest first")
    parser.add_argument("--code", default=ROOT, help="the checkout whose easyonline is timed (default: this one)")
    parser.add_argument("--time_only", action="store_true", help="only time the steps; print one JSON line")
    parser.add_argument("--baseline_code", default="", help="another checkout: time its step and this one's in turn")
    parser.add_argument("--pairs", type=int, default=5, help="with --baseline_code: runs of each, alternating")
    args = parser.parse_args()
    if args.baseline_code:
        compare(args)
        return
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    config = throughput_config(load_pipeline_config(args.config), tempfile.mkdtemp(prefix="easyonline-step-"))
    config.ClearField("kafka_train_input")
    trainer = build_trainer(config, online=False)
    size = config.data_config.batch_size
    warmup = 20
    lines = SyntheticCtrStream().lines(0, size * (warmup + (1 if args.time_only else 3) * args.steps))
    vectors = VectorCsvParser(trainer.specs)
    batches = [ParsedBatch.from_vectors(vectors.parse(lines[i:i + size])) for i in range(0, len(lines), size)]
    timer = Timer()

    def train(part):
        for parsed in part:
            timer.on_batch_end(trainer, None, parsed, trainer.engine.train_and_count(RawBatch([], {}), parsed))

    train(batches[:warmup])
    timed = batches[warmup:warmup + args.steps]
    started, cpu = time.perf_counter(), time.process_time()
    train(timed)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    samples = sum(b.size for b in timed)
    if args.time_only:
        print(json.dumps({"code": os.path.abspath(CODE), "samples_per_sec": round(samples / wall),
                          "cpu_us_per_sample": round(cpu / samples * 1e6, 1)}))
        return

    profile = cProfile.Profile()
    profile.enable()
    train(batches[warmup + args.steps:warmup + 2 * args.steps])
    profile.disable()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in stats.values())
    in_graph = sum(entry[2] for key, entry in stats.items() if key[2] == "<built-in method "
                   "tensorflow.python._pywrap_tfe.TFE_Py_Execute>")

    logdir = tempfile.mkdtemp(prefix="easyonline-step-trace-")
    tf.profiler.experimental.start(logdir)
    train(batches[warmup + 2 * args.steps:])
    tf.profiler.experimental.stop()
    trace = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)[0]
    ops = kernel_ms(trace)
    kernels = sum(ops.values())
    result = {
        "config": os.path.basename(args.config), "batch_size": size, "steps": args.steps,
        "samples_per_sec": round(samples / wall), "cpu_us_per_sample": round(cpu / samples * 1e6, 1),
        "ms_per_step": round(wall / args.steps * 1e3, 1),
        "share_in_traced_step": round(in_graph / total, 3) if total else None,
        "kernel_ms_per_step": round(kernels / args.steps, 1),
        "op_types": {op: {"ms_per_step": round(ms / args.steps, 2), "share": round(ms / kernels, 3)}
                     for op, ms in ops.most_common()},
    }
    print(json.dumps(result))
    print(f"\n{result['samples_per_sec']} samples/s, {result['cpu_us_per_sample']} us CPU/sample, "
          f"{result['ms_per_step']} ms/step; {result['share_in_traced_step']:.0%} of the Python profile inside the "
          f"traced step; kernels {result['kernel_ms_per_step']} ms/step (summed over threads)")
    print(f"{'op type':<34}{'ms/step':>9}{'share':>8}")
    for op, ms in ops.most_common(args.top):
        print(f"{op:<34}{ms / args.steps:>9.2f}{ms / kernels:>8.1%}")
    if args.names:
        print(f"\n{'op':<100}{'ms/step':>9}")
        for op, ms in kernel_ms(trace, by_name=True).most_common(args.names):
            print(f"{op[-100:]:<100}{ms / args.steps:>9.3f}")


def compare(args) -> None:
    """Times the baseline checkout's step and this one's in turn, each run a fresh process; prints the ratios."""
    runs: dict = {"baseline": [], "this": []}
    for _ in range(args.pairs):
        for which, code in (("baseline", args.baseline_code), ("this", ROOT)):
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--time_only", "--code", code,
                                  "--steps", str(args.steps), "--config", args.config],
                                 capture_output=True, text=True, check=True).stdout
            runs[which].append(json.loads(out.strip().splitlines()[-1])["samples_per_sec"])
    ratios = [round(new / old, 3) for old, new in zip(runs["baseline"], runs["this"])]
    medians = {which: statistics.median(values) for which, values in runs.items()}
    result = {"steps": args.steps, "pairs": args.pairs, "baseline_code": os.path.abspath(args.baseline_code),
              "samples_per_sec": runs, "ratios": ratios, "median_ratio": statistics.median(ratios),
              "ratio_of_medians": round(medians["this"] / medians["baseline"], 3)}
    print(json.dumps(result))
    print(f"\n{'pair':<6}{'baseline':>12}{'this':>12}{'ratio':>8}")
    for i, (old, new) in enumerate(zip(runs["baseline"], runs["this"])):
        print(f"{i + 1:<6}{old:>12,}{new:>12,}{new / old:>8.3f}")
    print(f"median{medians['baseline']:>12,.0f}{medians['this']:>12,.0f}{result['ratio_of_medians']:>8.3f}"
          f"  (median of the pairs' ratios {result['median_ratio']:.3f})")


if __name__ == "__main__":
    main()
