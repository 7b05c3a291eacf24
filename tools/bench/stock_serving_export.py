"""Benchmark: the two export kinds (TFRA tables, and core tables for stock TF Serving) at N embedding rows.

One run: DeepFM from samples/online.config is built untrained, its 26 tables
are filled with ``--rows`` random rows in all (evenly; the keys are the ids of
the raw values ``v0``, ``v1``, ... of each table's feature, so requests hit
them), and checkpointed. ``python -m easyonline.export`` then writes both
kinds from that checkpoint (timed). For each kind a fresh loader process
(``easyonline.serve``'s LoadedExport, as the server loads it) reports:

- load time: LoadedExport's constructor (for the TFRA kind that includes
  importing TFRA, as serving does), wall and CPU seconds;
- predict latency p50/p99 at batch 1 and 100: in-process calls of the
  serving function with raw inputs (ids known to the tables);
- peak RSS of the loader process (ru_maxrss) after loading and predicting;
- the export's size on disk.

Prints one JSON object, then a table.

    .venv/bin/python tools/bench/stock_serving_export.py [--rows 1000000] [--requests 300]
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

import easyonline  # noqa: E402,F401  (sets TF_USE_LEGACY_KERAS first)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SAMPLES = os.path.join(ROOT, "samples", "online.config")

# The loader: load one export, time predicts of known raw values, report peak RSS. argv: version, tables' row
# counts per feature (JSON), requests.
LOADER = r"""
import json, resource, sys, time
import numpy as np
version, per_table, requests = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
from easyonline.serve.loaded_export import LoadedExport
start, cpu = time.perf_counter(), time.process_time()
export = LoadedExport(version)
load, load_cpu = time.perf_counter() - start, time.process_time() - cpu
rng = np.random.default_rng(0)
def batch(n):
    return {name: ([f"v{i}" for i in rng.integers(0, per_table, n)] if dtype.name == "string"
                   else rng.random(n).astype(np.float32).tolist()) for name, dtype in export.inputs.items()}
out = {"load_s": load, "load_cpu_s": load_cpu, "stock": export.for_stock_serving,
       "tfra_loaded": any(m.startswith("tensorflow_recommenders_addons") for m in sys.modules)}
for size in (1, 100):
    bodies = [batch(size) for _ in range(requests)]
    for body in bodies[:20]:
        export.predict(body)
    times = []
    for body in bodies:
        t = time.perf_counter()
        probs = export.predict(body)["probs"]
        times.append(time.perf_counter() - t)
    assert probs.shape == (size,)
    out[f"batch{size}_p50_ms"] = float(np.percentile(times, 50) * 1000)
    out[f"batch{size}_p99_ms"] = float(np.percentile(times, 99) * 1000)
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def build_checkpoint(model_dir: str, rows: int, seed: int = 0) -> int:
    """Writes model_dir/pipeline.config and a checkpoint of an untrained DeepFM holding ``rows`` random rows;
    returns the rows per table."""
    from easyonline.config.loader import load_pipeline_config, to_text  # pylint: disable=g-import-not-at-top
    from easyonline.core.bootstrap import ensure_legacy_keras  # pylint: disable=g-import-not-at-top
    from easyonline.export.serving_module import ServingModule, raw_input_specs  # pylint: disable=g-import-not-at-top
    from easyonline.features.feature_spec import build_feature_specs  # pylint: disable=g-import-not-at-top
    from easyonline.features.signature import empty_features  # pylint: disable=g-import-not-at-top
    from easyonline.models.builder import build_model  # pylint: disable=g-import-not-at-top
    tf = ensure_legacy_keras()
    config = load_pipeline_config(SAMPLES)
    config.model_dir = model_dir
    config.train_config.ClearField("incr_save_config")  # storage none: the export starts no stream
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "pipeline.config"), "w") as f:
        f.write(to_text(config))
    specs = build_feature_specs(config)
    model = build_model(config, specs)
    model(empty_features(specs), training=False)
    per_table = rows // len(model.tables.embeddings)
    rng = np.random.default_rng(seed)
    inputs = raw_input_specs(specs)
    chunk = 200_000
    for begin in range(0, per_table, chunk):
        count = min(chunk, per_table - begin)
        raw = {name: tf.constant([f"v{i}" for i in range(begin, begin + count)]) if spec.dtype == tf.string
               else tf.zeros([count], spec.dtype) for name, spec in inputs.items()}
        features = ServingModule.features_of(specs, raw)
        for name, layer in model.tables.embeddings.items():
            (feature,) = specs.features_of_table(name)
            ids = features[feature.name]
            ids = ids.flat_values if isinstance(ids, tf.RaggedTensor) else ids
            values = rng.normal(0, 0.05, (count, layer.embedding_size)).astype(np.float32)
            layer.params.upsert(ids, values)
    tf.train.Checkpoint(model=model).write(os.path.join(model_dir, "model.ckpt-1"))
    return per_table


def export(model_dir: str, export_dir: str, *flags: str) -> tuple:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "easyonline.export", f"--config={model_dir}/pipeline.config",
                           f"--checkpoint_path={model_dir}/model.ckpt-1", f"--export_dir={export_dir}", *flags],
                          capture_output=True, text=True, env=_env())
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return proc.stdout.strip().splitlines()[-1], time.perf_counter() - start


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.abspath(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _du(path: str) -> float:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="embedding rows in all tables together")
    parser.add_argument("--requests", type=int, default=300, help="timed predicts per batch size")
    parser.add_argument("--work_dir", default="", help="default: a temporary directory, removed after")
    parser.add_argument("--build_checkpoint", default="", help=argparse.SUPPRESS)  # the child below: its model_dir
    args = parser.parse_args()
    if args.build_checkpoint:
        print(build_checkpoint(args.build_checkpoint, args.rows))
        return
    work = args.work_dir or tempfile.mkdtemp(prefix="stock-export-bench-")
    model_dir = os.path.join(work, "m")
    # (built in a child: this process then holds no table while the loaders measure memory)
    start = time.perf_counter()
    built = subprocess.run([sys.executable, os.path.abspath(__file__), f"--build_checkpoint={model_dir}",
                            f"--rows={args.rows}"], capture_output=True, text=True, env=_env())
    if built.returncode:
        raise RuntimeError(built.stderr[-3000:])
    per_table = int(built.stdout.strip().splitlines()[-1])
    result = {"rows": per_table * 26, "rows_per_table": per_table, "build_s": time.perf_counter() - start,
              "kinds": {}}
    for kind, flags in (("tfra", ()), ("stock", ("--for_stock_serving",))):
        version, seconds = export(model_dir, os.path.join(work, kind), *flags)
        loader = subprocess.run([sys.executable, "-c", LOADER, version, str(per_table), str(args.requests)],
                                capture_output=True, text=True, env=_env())
        if loader.returncode:
            raise RuntimeError(loader.stderr[-3000:])
        result["kinds"][kind] = {"export_s": seconds, "export_mb": _du(version),
                                 **json.loads(loader.stdout.strip().splitlines()[-1])}
    result["load_average"] = os.getloadavg()  # on a shared machine, figures taken under load are slower
    print(json.dumps(result, indent=1))
    columns = ["export_s", "export_mb", "load_s", "load_cpu_s", "batch1_p50_ms", "batch1_p99_ms", "batch100_p50_ms",
               "batch100_p99_ms", "peak_rss_mb"]
    print(f"\n{result['rows']:,} rows | " + " | ".join(columns))
    for kind, row in result["kinds"].items():
        print(f"{kind:>14} | " + " | ".join(f"{row[c]:.2f}" for c in columns))
    if not args.work_dir:
        subprocess.run(["rm", "-rf", work], check=False)


if __name__ == "__main__":
    main()
