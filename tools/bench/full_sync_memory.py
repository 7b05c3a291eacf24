"""Benchmark: a trainer process's extra memory while it publishes a full sync (or writes a base) of a large table.

Builds one TFRA embedding table of --rows rows (default 10,000,000) of
--dim floats (default 16, the embedding_dim of samples/online.config) in a
child process, as a single-process trainer holds it, and publishes a full
sync through UpdatePublisher to the directory transport (or writes a base
with --what base), then measures the child's RSS: before the tables, with
the tables, the peak during the sync (the kernel's high-water mark VmHWM,
reset after the tables were built, plus a 5 ms sampler), and after.

The tables' own size is given two ways:
- ``table_bytes``: rows x (8 + 4 x dim), the keys and embeddings the sync
  carries (no optimizer slots: this bench's table has none; a trainer's
  slots live in other tables that a sync does not read);
- ``table_rss``: how much the process's RSS grew while the table was built.
``ratio`` = (peak RSS during the sync - RSS before it) / table_bytes;
``ratio_rss`` the same over table_rss. Target: ratio < 1.3.

--mode old runs the code before streaming (take_snapshot with full_sync,
then encode_update: every message built before the first send), on the same
machine, to show the difference; it does not assert the target.

    .venv/bin/python tools/bench/full_sync_memory.py [--rows 10000000] [--dim 16] [--what sync|base] [--modes new,old]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

TARGET = 1.3


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _hwm() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_hwm() -> bool:
    """Resets VmHWM to the current RSS (Linux >= 4.0); False where not permitted."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Sampler:
    """Samples RSS every 5 ms on a thread (catches peaks where VmHWM cannot be reset)."""

    def __init__(self):
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss())
            time.sleep(0.005)

    def __enter__(self):
        self.peak = _rss()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())


def child(rows: int, dim: int, mode: str, what: str, work: str) -> dict:
    """Runs in its own process: builds the table, runs one sync or base, returns the figures."""
    import numpy as np

    from easyonline.config import parse_pipeline_config
    from easyonline.core.bootstrap import ensure_legacy_keras
    from easyonline.embedding.dynamic_tables import DynamicTables
    from easyonline.features import build_feature_specs
    from easyonline.publish import base_delta
    from easyonline.publish.nonfinite import NonFiniteGuard
    from easyonline.publish.publisher import PublishJob, UpdatePublisher
    from easyonline.publish.snapshot import EagerTableRows, take_snapshot
    from easyonline.updates.codec import encode_update
    from easyonline.updates.directory_sink import DirectorySink
    from easyonline.updates.param_ids import ParameterIds

    tf = ensure_legacy_keras()
    config = f"""
    model_dir: "{work}/model"
    data_config {{ input_fields {{ input_name: "label" input_type: INT32 }} input_fields {{ input_name: "id" }}
                  label_fields: "label" }}
    feature_configs {{ input_names: "id" embedding_dim: {dim} }}
    model_config {{ model_class: "dnn" }}
    """
    specs = build_feature_specs(parse_pipeline_config(config))
    tables = DynamicTables(specs, name="tables")
    params = tables.embeddings["id"].params
    params.size()  # creates the (empty) table
    rss_before_tables = _rss()
    step = 1_000_000
    for start in range(0, rows, step):
        n = min(step, rows - start)
        keys = np.arange(start, start + n, dtype=np.int64) * 7919 + 13
        values = np.random.default_rng(start).standard_normal((n, dim), dtype=np.float32)
        params.upsert(tf.constant(keys), tf.constant(values))
        del keys, values
    assert int(params.size()) == rows
    rss_with_tables = _rss()
    ids = ParameterIds(dense={"w": 0}, tables={"id": (0, dim)})
    dense = {0: np.ones((64, 64), np.float32)}
    table_rows = EagerTableRows(tables)
    sink = DirectorySink(os.path.join(work, "updates"))
    publisher = None
    if what == "sync" and mode == "new":  # started with the trainer (it builds the lookup), not per sync
        publisher = UpdatePublisher(sink, "bench", ids, table_rows, 1_000_000, os.path.join(work, "model"))
        publisher.start(restored_step=0)
    rss_before = _rss()
    hwm_reset = _reset_hwm()
    started = time.time()
    with Sampler() as sampler:
        if what == "base" and mode == "new":
            info = base_delta.write_base(os.path.join(work, "saves"), table_rows, ids, 1, time.time(), {}, dense,
                                         {}, "bench", NonFiniteGuard("saved"))
            sent_rows, messages = info.manifest["rows"], info.manifest["parts"]
        elif what == "base":  # the code before streaming: the whole snapshot, then every part
            snapshot = take_snapshot(table_rows, ids, 1, time.time(), {}, dense, {}, {}, full_sync=True)
            info = base_delta.write_save(os.path.join(work, "saves"), "base", snapshot, ids, "bench", None, None,
                                         64 << 20)
            sent_rows, messages = info.manifest["rows"], info.manifest["parts"]
            del snapshot
        elif mode == "new":
            assert publisher.offer(PublishJob(1, time.time(), {}, dense, {}, {}, full_sync=True))
            assert publisher.close(timeout=3600)
            sent_rows = publisher.last_acked.rows
            messages = publisher.last_acked.last_sequence - publisher.last_acked.first_sequence + 1
        else:  # the publisher's code before streaming: read everything, encode everything, one send
            sink.connect()
            snapshot = take_snapshot(table_rows, ids, 1, time.time(), {}, dense, {}, {}, full_sync=True)
            encoded = encode_update(snapshot, "bench", 1, 1, 1_000_000, {0: dim})
            sink.send(list(enumerate(encoded, start=1)), b"bench")
            sent_rows, messages = snapshot.counts()["rows"], len(encoded)
            del snapshot, encoded
    seconds = time.time() - started
    peak = max(sampler.peak, _hwm() if hwm_reset else 0)
    rss_after = _rss()
    assert sent_rows == rows, (sent_rows, rows)
    table_bytes = rows * (8 + 4 * dim)
    table_rss = rss_with_tables - rss_before_tables
    return {"mode": mode, "what": what, "rows": rows, "dim": dim, "messages": messages, "seconds": round(seconds, 1),
            "table_bytes": table_bytes, "table_rss": table_rss, "rss_before_tables": rss_before_tables,
            "rss_before": rss_before, "rss_peak": peak, "rss_after": rss_after, "peak_extra": peak - rss_before,
            "ratio": round((peak - rss_before) / table_bytes, 3),
            "ratio_rss": round((peak - rss_before) / max(table_rss, 1), 3), "hwm_reset": hwm_reset}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows in the table (default 10M)")
    parser.add_argument("--dim", type=int, default=16, help="floats per row (default 16, as samples/online.config)")
    parser.add_argument("--what", choices=["sync", "base"], default="sync",
                        help="a full sync to the directory transport, or a base save (default sync)")
    parser.add_argument("--modes", default="new,old", help="new (streamed), old (before streaming), or both")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, work = args.child.split(":", 1)
        print(json.dumps(child(args.rows, args.dim, mode, args.what, work)))
        return
    results = []
    for mode in args.modes.split(","):
        with tempfile.TemporaryDirectory(prefix="full_sync_memory_") as work:
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--rows", str(args.rows), "--dim",
                                  str(args.dim), "--what", args.what, "--child", f"{mode}:{work}"],
                                 check=True, capture_output=True, text=True)
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(json.dumps({"target_ratio": TARGET, "runs": results}))
    print()
    mb = 1 << 20
    print(f"{args.what} of {args.rows:,} rows x dim {args.dim}: table_bytes {results[0]['table_bytes'] / mb:.0f} MiB, "
          f"RSS growth while building it {results[0]['table_rss'] / mb:.0f} MiB")
    print(f"{'mode':<5} {'before MiB':>10} {'peak MiB':>9} {'after MiB':>10} {'extra MiB':>10} {'ratio':>6} "
          f"{'ratio_rss':>9} {'messages':>9} {'secs':>6}")
    for r in results:
        print(f"{r['mode']:<5} {r['rss_before'] / mb:>10.0f} {r['rss_peak'] / mb:>9.0f} {r['rss_after'] / mb:>10.0f} "
              f"{r['peak_extra'] / mb:>10.0f} {r['ratio']:>6.2f} {r['ratio_rss']:>9.2f} {r['messages']:>9} "
              f"{r['seconds']:>6.1f}")
    for r in results:
        if r["mode"] == "new":
            assert r["ratio"] < TARGET, f"peak extra RSS {r['ratio']:.2f}x the table's bytes, target < {TARGET}"


if __name__ == "__main__":
    main()
