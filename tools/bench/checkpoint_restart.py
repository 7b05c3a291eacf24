"""Benchmark: checkpoint time and size versus table size, and time from restart to the first trained batch.

DeepFM from samples/online.config (26 tables of 16+1 floats per row, Adam,
so each key also has two slot rows). For each total key count the tables are
filled with random rows (table and both Adam slots, as training would leave
them), a checkpoint is saved twice and both are timed (the second is what
every later save of a run costs), and its files measured. Then a new
process is started on that model_dir: the time from its launch to its first
trained batch (imports, model build, restore, first step) is reported, with
the restore alone. Each size in its own process, so memory does not carry over.

    .venv/bin/python tools/bench/checkpoint_restart.py [--keys 100000,1000000,3000000]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, ROOT)


def config_for(model_dir, data):
    from easyonline.config import load_pipeline_config  # pylint: disable=g-import-not-at-top
    config = load_pipeline_config(os.path.join(ROOT, "samples", "online.config"))
    config.model_dir = model_dir
    config.ClearField("kafka_train_input")
    config.train_config.ClearField("incr_save_config")
    config.file_train_input.paths.append(data)
    config.train_config.num_steps = 0
    return config


def fill_and_save(model_dir: str, data: str, keys: int) -> dict:
    """Child: fills the tables with ``keys`` rows in all, saves a checkpoint, reports time and size."""
    import numpy as np  # pylint: disable=g-import-not-at-top
    import easyonline  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    from easyonline.jobs.online_train import build_trainer  # pylint: disable=g-import-not-at-top
    trainer = build_trainer(config_for(model_dir, data), online=False)
    tables = trainer.model.tables
    per_table = keys // len(tables.embeddings)
    rng = np.random.default_rng(0)
    for name, layer in tables.embeddings.items():
        ids = rng.integers(0, 2**62, per_table, dtype=np.int64)
        for variable in [layer.params] + list(tables.slot_variables(name)):  # (Adam's m and v: a view of the rows' columns)
            variable.upsert(ids, rng.normal(0, 0.01, (per_table, variable.dim)).astype(np.float32))
    started = time.perf_counter()
    trainer.save_checkpoint()
    first = time.perf_counter() - started  # (a single process's first save also traces the save: traced_save.py)
    trainer.engine.count(0)  # a step on, so the next save is a checkpoint of its own, as the next one of a run
    started = time.perf_counter()
    path = trainer.save_checkpoint()
    seconds = time.perf_counter() - started
    size = sum(os.path.getsize(f) for f in glob.glob(path + ".*"))
    return {"keys": per_table * len(tables.embeddings), "save_seconds": round(seconds, 3),
            "first_save_seconds": round(first, 3), "bytes": size}


def restart(model_dir: str, data: str) -> dict:
    """Child: restores the latest checkpoint and trains one batch; reports its own timings."""
    import easyonline  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    from easyonline.core.callbacks import Callback  # pylint: disable=g-import-not-at-top
    from easyonline.jobs.online_train import build_trainer  # pylint: disable=g-import-not-at-top
    imported = time.time()

    class FirstBatch(Callback):
        at = None

        def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
            if self.at is None:
                self.at = time.time()
                trainer.stop("first batch trained")

    first = FirstBatch()
    started = time.time()
    trainer = build_trainer(config_for(model_dir, data), online=False, callbacks=[first])
    built = time.time()
    trainer.run()
    return {"imported_at": imported, "built_at": built, "construct_and_restore_seconds": round(built - started, 3),
            "first_batch_at": first.at, "restored_step": trainer.step - 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", default="100000,1000000,3000000")
    parser.add_argument("--child", default="")
    parser.add_argument("--model_dir", default="")
    parser.add_argument("--data", default="")
    parser.add_argument("--count", type=int, default=0)
    args = parser.parse_args()
    if args.child:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        result = fill_and_save(args.model_dir, args.data, args.count) if args.child == "save" \
            else restart(args.model_dir, args.data)
        print("RESULT " + json.dumps(result), flush=True)
        return
    sys.path.insert(0, ROOT)
    from easyonline.tools.stream_producer import SyntheticCtrStream  # pylint: disable=g-import-not-at-top
    work = tempfile.mkdtemp(prefix="easyonline-ckpt-bench-")
    data = os.path.join(work, "data.csv")
    with open(data, "wb") as f:
        f.write(b"\n".join(SyntheticCtrStream().lines(0, 4096)) + b"\n")
    rows = []

    def child(*extra):
        out = subprocess.run([sys.executable, os.path.abspath(__file__), *extra], capture_output=True, text=True,
                             check=True)
        return json.loads(next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))[7:])

    for keys in [int(k) for k in args.keys.split(",")]:
        model_dir = os.path.join(work, f"m{keys}")
        saved = child("--child=save", f"--model_dir={model_dir}", f"--data={data}", f"--count={keys}")
        launched = time.time()
        restarted = child("--child=restart", f"--model_dir={model_dir}", f"--data={data}")
        rows.append({**saved, "restart_to_first_batch_seconds": round(restarted["first_batch_at"] - launched, 3),
                     "construct_and_restore_seconds": restarted["construct_and_restore_seconds"],
                     "process_start_and_imports_seconds": round(restarted["imported_at"] - launched, 3)})
    print(json.dumps({"model": "deepfm", "tables": 26, "row_floats": 17, "slots": "adam m, v", "runs": rows}))
    print()
    print(f"{'keys':>10} {'save s':>8} {'1st save s':>11} {'size MB':>9} {'restart->1st batch s':>21} "
          f"{'build+restore s':>16} {'imports s':>10}")
    for r in rows:
        print(f"{r['keys']:>10} {r['save_seconds']:>8.2f} {r['first_save_seconds']:>11.2f} {r['bytes'] / 1e6:>9.1f} "
              f"{r['restart_to_first_batch_seconds']:>21.2f} {r['construct_and_restore_seconds']:>16.2f} "
              f"{r['process_start_and_imports_seconds']:>10.2f}")


if __name__ == "__main__":
    main()
