"""Benchmark: what applying an update costs a server, and what it does to predicts meanwhile.

A server applies every message of the update stream: with sparse_save_secs_caught_up 0.1 that is ten a second,
on the CPU that answers predicts. DeepFM from samples/online.config (26 tables; ``--hidden_units`` widens its
MLP, so the dense part of every message grows) trains 20,000 synthetic samples and is exported, then loaded as
``easyonline.serve`` loads it. Timed, per message kind (``--messages`` each, medians of ``--rounds`` rounds):

- every table's rows (``--keys`` each) and every dense parameter: what the trainer sends while it trains;
- one table's rows only (a stream whose samples carry few features, or the parts of a full sync);
- the dense parameters only;
- nothing but the header (no entry).

Each as the time of ``LoadedExport.apply`` (the message decoded to tensors and the export's update function
run) and the process's CPU for it. Then batch-1 predicts in process, quiet and while another thread applies the
first kind ten times a second: the p99 is what a served request pays for the server's updates.

    .venv/bin/python tools/bench/update_apply_cost.py [--keys 300] [--hidden_units 128,64] [--rounds 3]

Prints a JSON line and a table; asserts the tables hold the rows of the last message applied.
"""
import argparse
import json
import os
import sys
import tempfile
import threading
import time
from typing import Dict, List

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import easyonline  # noqa: E402,F401  (sets TF_USE_LEGACY_KERAS first)
from easyonline.protos import update_pb2  # noqa: E402
from easyonline.serve.loaded_export import LoadedExport  # noqa: E402
from easyonline.tools.sample_export import requests, trained_export  # noqa: E402

KINDS = ("all tables and dense", "one table", "dense only", "no entry")


def messages(export: LoadedExport, kind: str, keys: int, count: int, seed: int) -> List[update_pb2.UpdateMessage]:
    """``count`` messages of ``kind`` with ``keys`` new random rows a table, dense values as the trainer sends
    them (each parameter whole)."""
    rng = np.random.default_rng(seed)
    tables = {"all tables and dense": list(export.table_widths), "one table": list(export.table_widths)[:1]}
    out = []
    for _ in range(count):
        message = update_pb2.UpdateMessage()
        if kind in ("all tables and dense", "dense only"):
            for param_id, shape in export.dense_shapes.items():
                values = rng.standard_normal(int(np.prod(shape))).astype(np.float32) * 0.01
                message.dense.add(id=param_id, shape=shape, offset=0, values=values.tobytes())
        for table_id in tables.get(kind, []):
            width = export.table_widths[table_id]
            message.sparse.add(table_id=table_id, dim=width,
                               keys=rng.integers(1, 1 << 40, keys).astype(np.int64).tobytes(),
                               values=rng.standard_normal((keys, width)).astype(np.float32).tobytes())
        out.append(message)
    return out


def apply_cost(export: LoadedExport, batch: List[update_pb2.UpdateMessage]) -> Dict[str, float]:
    """Median ms of ``apply`` over ``batch``, and the process's CPU ms a message."""
    times = []
    cpu = time.process_time()
    for message in batch:
        started = time.perf_counter()
        export.apply(message)
        times.append(time.perf_counter() - started)
    return {"ms": float(np.median(times) * 1e3), "cpu_ms": (time.process_time() - cpu) / len(batch) * 1e3}


def predict_latency(export: LoadedExport, one: List[Dict[str, list]], count: int) -> Dict[str, float]:
    times = []
    for i in range(count):
        started = time.perf_counter()
        export.predict(one[i % len(one)])
        times.append(time.perf_counter() - started)
    ms = np.array(times) * 1e3
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99))}


def check_applied(export: LoadedExport, message: update_pb2.UpdateMessage) -> None:
    """The tables hold every key the message sent."""
    held = export.held_keys()
    for entry in message.sparse:
        sent = np.frombuffer(entry.keys, np.int64)
        assert np.isin(sent, held[entry.table_id]).all(), f"table {entry.table_id} lacks keys it was sent"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=300, help="new rows a table in a message that carries it")
    parser.add_argument("--hidden_units", default="", help="the MLP's widths, e.g. 1024,512,256 (default: the "
                                                           "sample config's 128,64)")
    parser.add_argument("--messages", type=int, default=30, help="messages of each kind a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--predicts", type=int, default=3000, help="batch-1 predicts a round, quiet and applying")
    parser.add_argument("--train_samples", type=int, default=20000)
    args = parser.parse_args(argv)
    units = [int(u) for u in args.hidden_units.split(",")] if args.hidden_units else None
    work = tempfile.mkdtemp(prefix="easyonline-update-apply-")
    export = LoadedExport(trained_export(work, args.train_samples, hidden_units=units))
    one = requests(export, 1, 200)
    batches = {kind: messages(export, kind, args.keys, args.messages, seed) for seed, kind in enumerate(KINDS)}
    for kind in KINDS:  # warm: the first call of each shape
        export.apply(batches[kind][0])
    for request in one[:50]:
        export.predict(request)
    runs: Dict[str, List[dict]] = {kind: [] for kind in KINDS}
    runs.update({"predict quiet": [], "predict while applying": []})
    for _ in range(args.rounds):
        for kind in KINDS:
            runs[kind].append(apply_cost(export, batches[kind]))
        runs["predict quiet"].append(predict_latency(export, one, args.predicts))
        stop = threading.Event()

        def keep_applying():
            applied = 0
            while not stop.wait(0.1):
                export.apply(batches[KINDS[0]][applied % args.messages])
                applied += 1
        applier = threading.Thread(target=keep_applying)
        applier.start()
        runs["predict while applying"].append(predict_latency(export, one, args.predicts))
        stop.set()
        applier.join()
    check_applied(export, batches[KINDS[0]][-1])
    median = {key: {stat: float(np.median([r[stat] for r in values])) for stat in values[0]}
              for key, values in runs.items()}
    result = {"keys": args.keys, "tables": len(export.table_widths),
              "dense_floats": int(sum(np.prod(s) for s in export.dense_shapes.values())),
              "dense_parameters": len(export.dense_shapes), "rounds": args.rounds, "median": median, "runs": runs}
    print(json.dumps(result))
    print(f"\nupdate apply, {result['tables']} tables x {args.keys} keys, {result['dense_parameters']} dense "
          f"parameters of {result['dense_floats']:,} floats; medians of {args.rounds} rounds")
    print(f"{'message':<24}{'apply ms':>10}{'CPU ms':>9}")
    for kind in KINDS:
        print(f"{kind:<24}{median[kind]['ms']:>10.2f}{median[kind]['cpu_ms']:>9.2f}")
    print(f"{'batch-1 predict':<24}{'p50 ms':>10}{'p99 ms':>9}")
    for key in ("predict quiet", "predict while applying"):
        print(f"{key:<24}{median[key]['p50_ms']:>10.3f}{median[key]['p99_ms']:>9.3f}")
    return result


if __name__ == "__main__":
    main()
