"""Benchmark: a dynamic table's cost as it grows (bytes per row; seconds and memory to grow, save, restore, full-sync,
export and load for serving; step samples/s).

Measured at several table sizes and for several optimizers, each figure
against the same figure at the smallest size.

The model is samples/online.config's DeepFM (26 TFRA tables of 16 + 1 floats
a row: the embedding and DeepFM's wide weight) unless --config names another.
For each optimizer (Adam, Adagrad; FTRL with --optimizers: each table's
slots are tables of their own, keys included; the trainer keeps Adam's m and v in the table's rows,
embedding/rows_with_state.py) and
each size N, one child
process:

- builds the trainer (``easyonline.jobs.online_train.build_trainer``), trains
  the synthetic stream's batches once (inserts its ids, traces the step), then
  --passes more times, timed (the fastest: the step on near-empty tables);
- grows the tables by N rows: keys, values, every optimizer slot and, when the
  config keeps them, the per-id statistics (``--spread one``: all N in the
  first table, C1, the one-big-table case; ``all``: N / tables in each). Rows
  are upserted 1M at a time; the upserts alone are timed (not making the
  arrays);
- ``bytes_per_row``: VmRSS (/proc/self/status) after growth minus before it,
  over N, both read after ``malloc_trim(0)`` (free heap given back: the
  tables' own memory, not the arrays the bench made and freed). Beside it the
  theoretical bytes: (8 + 4 x width) for the row and (8 + 4 x its width) for
  each slot table's (+ 8 + 12 for a statistics row), and their ratio, the
  overhead factor of TFRA's hash tables;
- trains the same batches again, --passes times (the fastest: the step with
  the table at N; the stream's ~13k ids a table, so a small working set in a
  big table);
- saves a checkpoint with the project's own path (``trainer.save_checkpoint``:
  ``Checkpointer`` -> tf.train.CheckpointManager), timed, with the peak RSS
  above the grown tables while saving (VmHWM, reset before: a whole-table
  copy shows as ~theoretical bytes x N);
- then publishes a full sync of every table (the tables at N rows; the
  embedding rows only, as a sync sends: no optimizer slots nor statistics)
  the way the trainer's publishing callback does: an ``UpdatePublisher``
  over ``trainer.table_rows()`` with the config file's incr_save_config
  message sizes, to a ``DirectorySink`` in a temporary folder (deleted
  after). The publisher is started first, untimed (a trainer starts it
  once); timed (wall and process CPU, every thread) from handing it the full
  sync job until it closed with every message written; the bytes written
  (``sync_bytes``), the messages, and the peak RSS above the RSS before it
  (VmHWM reset first, as the save's).

Two more child processes per size each build the same trainer on an empty
model_dir and restore the checkpoint with the project's
``Checkpointer.restore_latest`` (the path a trainer's start takes), timed
with the build, with its RSS growth per row and its peak above the grown RSS:
one builds its tables sized for the checkpoint's rows
(``table_capacities(checkpoint_tables(...).rows)``, what a trainer, an export and
eval do now when they start from a checkpoint), the other empty, as they did
before (``old``: the tables double as the rows arrive), so both are measured
in the same run.

One more child exports the checkpoint with ``export_saved_model`` (what
``python -m easyonline.export`` calls, jobs/export_job.py) twice, one after
the other in the same process: for the serving processor (``normal``), then
for stock TensorFlow Serving (``stock``, ``for_stock_serving=True``); each
timed (wall, CPU), with its peak RSS above the RSS before it (VmHWM reset)
and the version's bytes on disk. The first export also pays the process's
first-time costs (TFRA's ops, tracing), the second starts with what the
first left in memory. Then one child per export loads it as the serving
process does (``LoadedExport(version)``) and answers one batch-1 predict
(a synthetic stream line made into the export's inputs by
predict_request.py's ``build_request``): timed (load + that predict, and
the predict alone), with the RSS after both minus the RSS before
(``serve_*_rss_growth_bytes``) and the peak above it.

Every figure is printed with its ratio to the figure at the smallest size of
the run (the per-row and per-second figures flat = linear growth), and the
step's samples/s also against the near-empty step of the same process (less
moved by other processes' load on the machine than figures of two processes).

Sizes are bounded by memory: before each child, its peak is estimated from
the last size measured for that optimizer (else 4x the theoretical bytes) and
the run skips that optimizer's larger sizes with a printed reason when it
would not fit under --max_rss_gib nor in /proc/meminfo's MemAvailable less
1 GiB. A size's peak (``peak_rss``) is the largest of all its children's
(grow, save, sync, restores, exports, loads).

Seconds are wall-clock; the JSON also has each one's process CPU seconds
(``*_cpu_seconds``), less moved by other processes' load. Three tables are
printed: the growth, step, save and restores; the full sync and the two
exports; the two loads for serving. The seconds and bytes of the sync, the
exports and the loads are compared per row to the smallest size's in
``ratios_to_smallest`` (their fixed costs, large at small sizes, make the
ratio fall below 1 as N grows; a figure that grows faster than N shows above
1).

    .venv/bin/python tools/bench/table_scale.py [--sizes 1M,5M,10M,30M] [--optimizers adam,adagrad,ftrl]
        [--spread one|all] [--batches 30] [--passes 3] [--max_rss_gib 18] [--config samples/online.config]
"""
import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, ROOT)

CHUNK = 1_000_000  # rows per upsert while growing
GIB = 1 << 30
OPTIMIZERS = {"adam": "adam_optimizer", "adagrad": "adagrad_optimizer", "ftrl": "ftrl_optimizer"}
# Each slot table's width in rows' widths (Adam: m and v in one table; Adagrad: accumulator; FTRL: accum, linear)
SLOTS = {"adam": [2], "adagrad": [1], "ftrl": [1, 1]}
EXPORT_KINDS = ("normal", "stock")  # export_saved_model for the serving processor, and for_stock_serving
PRIOR_FACTOR = 4.0  # a size's peak RSS over its theoretical bytes, until one size of the optimizer is measured


def parse_size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1_000, "M": 1_000_000, "G": 1_000_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("KMG")) * scale)


def _status(field: str, path: str = "/proc/self/status") -> int:
    """A field of a /proc file in kB, in bytes (VmRSS, VmHWM of /proc/self/status; MemAvailable of /proc/meminfo)."""
    with open(path) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _trim() -> None:
    """Gives free heap back to the system, so VmRSS counts what is in use."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def _rss() -> int:
    _trim()
    return _status("VmRSS")


def _reset_hwm() -> None:
    """VmHWM from now on (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def mem_available() -> int:
    return _status("MemAvailable", "/proc/meminfo")


def config_for(config_path: str, optimizer: str, model_dir: str):
    from easyonline.config import load_pipeline_config  # pylint: disable=g-import-not-at-top
    from easyonline.tools.throughput import throughput_config  # pylint: disable=g-import-not-at-top
    config = load_pipeline_config(config_path)
    if OPTIMIZERS[optimizer] not in ("", config.train_config.optimizer_config.WhichOneof("optimizer")):
        getattr(config.train_config.optimizer_config, OPTIMIZERS[optimizer]).SetInParent()  # its defaults
    config.train_config.ClearField("sparse_optimizer_config")
    return throughput_config(config, model_dir)


def grown_tables(tables, rows: int, spread: str) -> Dict[str, int]:
    """Rows to add to each table: all in the first (``one``), or evenly over every table (``all``)."""
    names = sorted(tables.embeddings)
    if spread == "one":
        return {names[0]: rows}
    share = {name: rows // len(names) for name in names}
    share[names[0]] += rows - sum(share.values())
    return share


def train_pass(trainer, batches) -> float:
    """Samples/s of training ``batches`` (parsed) once, as the loop trains them."""
    from easyonline.inputs.raw_batch import RawBatch  # pylint: disable=g-import-not-at-top
    samples = 0
    started = time.perf_counter()
    for parsed in batches:
        trainer.engine.train_and_count(RawBatch([], {}), parsed)
        samples += parsed.size
    return samples / (time.perf_counter() - started)


def best_rate(trainer, batches, passes: int) -> float:
    """The fastest of ``passes`` passes: the least slowed by other processes on the machine."""
    return max(train_pass(trainer, batches) for _ in range(passes))


def dir_bytes(path: str) -> int:
    """Bytes of the files under ``path``."""
    return sum(os.path.getsize(os.path.join(folder, f)) for folder, _, files in os.walk(path) for f in files)


def full_sync(trainer, config_path: str, work: str) -> dict:
    """A full sync of every table as the trainer's publishing callback sends one (``IncrementalPublish``: an
    ``UpdatePublisher`` over ``trainer.table_rows()``, the config's incr_save_config message sizes), to a
    directory sink in a temporary folder of ``work``, deleted after: timed from the job's hand-over (its dense
    values read) until the publisher closed with every message written; its peak RSS above the RSS before."""
    from easyonline.config import load_pipeline_config  # pylint: disable=g-import-not-at-top
    from easyonline.publish.publisher import PublishJob, UpdatePublisher  # pylint: disable=g-import-not-at-top
    from easyonline.updates.directory_sink import DirectorySink  # pylint: disable=g-import-not-at-top
    from easyonline.updates.param_ids import (  # pylint: disable=g-import-not-at-top
        dense_variables, ensure_parameter_ids)
    from easyonline.updates.signing import signer  # pylint: disable=g-import-not-at-top
    from easyonline.updates.transport import stream_model_name  # pylint: disable=g-import-not-at-top

    # (the bench's config has no incr_save_config, throughput_config clears it: the message sizes are the file's)
    incr = load_pipeline_config(config_path).train_config.incr_save_config
    model_dir = trainer.config.model_dir
    ids = ensure_parameter_ids(model_dir, trainer.model)  # (the ids the export reads from model_dir too)
    dense_vars = {ids.dense[name]: var for name, var in dense_variables(trainer.model).items()}
    with tempfile.TemporaryDirectory(prefix="sync-", dir=work) as folder:
        sink = DirectorySink(os.path.join(folder, "updates"))  # (no retention: every message stays to be counted)
        # where the stream's numbering is kept: a folder of its own, not the checkpoint's model_dir
        publisher = UpdatePublisher(sink, stream_model_name(incr, model_dir), ids, trainer.table_rows(),
                                    incr.max_message_bytes, folder, incr.max_pending_updates,
                                    incr.full_sync_send_bytes, signer(incr))
        publisher.start(trainer.step)  # untimed, as full_sync_memory.py: a trainer starts it once (builds the lookup)
        publisher.take_full_sync()  # (a new stream for a trained model asks for one: this job is it)
        rss_before = _rss()
        _reset_hwm()
        started, cpu = time.perf_counter(), time.process_time()
        job = PublishJob(trainer.read_step(), time.time(), dict(trainer.positions),
                         trainer.read_variables(dense_vars), {}, {}, full_sync=True)
        assert publisher.offer(job)
        assert publisher.close(timeout=3600), publisher.error
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        peak = _status("VmHWM")
        acked = publisher.last_acked
        assert acked is not None and acked.full_sync, acked
        written = dir_bytes(sink.directory)
    return {"sync_seconds": round(seconds, 3), "sync_cpu_seconds": round(cpu, 3), "sync_rss_before": rss_before,
            "peak_sync": peak, "sync_bytes": written, "sync_messages": acked.last_sequence - acked.first_sequence + 1,
            "sync_rows": acked.rows}


def grow_child(args) -> dict:
    """Builds the trainer, times the step, grows the tables by ``args.count`` rows, times the step and a save."""
    import numpy as np  # pylint: disable=g-import-not-at-top
    import easyonline  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    from easyonline.features.csv_parser import ParsedBatch  # pylint: disable=g-import-not-at-top
    from easyonline.features.vector_csv import VectorCsvParser  # pylint: disable=g-import-not-at-top
    from easyonline.jobs.online_train import build_trainer  # pylint: disable=g-import-not-at-top
    from easyonline.tools.stream_producer import SyntheticCtrStream  # pylint: disable=g-import-not-at-top

    trainer = build_trainer(config_for(args.config, args.optimizer, args.model_dir), online=False)
    tables = trainer.model.tables
    batch_size = trainer.config.data_config.batch_size
    lines = SyntheticCtrStream().lines(0, args.batches * batch_size)
    parser = VectorCsvParser(trainer.specs)
    batches = [ParsedBatch.from_vectors(parser.parse(lines[i:i + batch_size]))
               for i in range(0, len(lines), batch_size)]
    train_pass(trainer, batches)  # traces the step, inserts the stream's ids
    rate_empty = best_rate(trainer, batches, args.passes)
    rows_before = sum(tables.sizes().values())

    share = grown_tables(tables, args.count, args.spread)
    widths, stored, slots, stats = {}, {}, {}, {}
    for name in share:
        widths[name] = tables.row_width(name)
        stored[name] = tables.embeddings[name].params.dim  # (the row and, for Adam, its m and v: rows_with_state.py)
        # slot tables of their own (a view of the table's state columns holds nothing)
        slots[name] = tables.slot_variables(name) if stored[name] == widths[name] else []
        stats[name] = tables.statistics.get(name)
    rss_before = _rss()
    _reset_hwm()
    rng = np.random.default_rng(0)
    upsert_seconds, upsert_cpu, chunk_seconds = 0.0, 0.0, []
    offset = 1 << 40  # (keys apart from the stream's hashed ids, which are almost surely elsewhere)
    for name, count in share.items():
        for start in range(0, count, CHUNK):
            n = min(CHUNK, count - start)
            # distinct keys spread over the int64s: i * an odd number mod 2^63 is one-to-one
            keys = ((np.arange(offset + start, offset + start + n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
                    & np.uint64((1 << 63) - 1)).astype(np.int64)
            values = rng.standard_normal((n, widths[name]), dtype=np.float32) * np.float32(0.01)
            if stored[name] > widths[name]:  # Adam's m and v beside the row
                values = np.hstack([values, np.full((n, stored[name] - widths[name]), 0.1, np.float32)])
            stat_values = np.zeros((n, 3), np.float32) if stats[name] is not None else None
            started, cpu = time.perf_counter(), time.process_time()
            tables.embeddings[name].params.upsert(keys, values)
            for slot in slots[name]:
                slot.upsert(keys, np.full((n, slot.dim), 0.1, np.float32))
            if stats[name] is not None:
                stats[name].upsert(keys, stat_values)
            chunk_seconds.append(time.perf_counter() - started)
            upsert_seconds += chunk_seconds[-1]
            upsert_cpu += time.process_time() - cpu
            del keys, values, stat_values
        offset += count
    peak_grow = _status("VmHWM")
    rss_after = _rss()
    rows_after = sum(tables.sizes().values())
    assert rows_after == rows_before + args.count, (rows_before, rows_after, args.count)
    slot_rows = sum(int(slot.size()) for name in share for slot in slots[name])
    rate_grown = best_rate(trainer, batches, args.passes)

    rss_before_save = _rss()
    _reset_hwm()
    started, cpu = time.perf_counter(), time.process_time()
    path = trainer.save_checkpoint()
    save_seconds, save_cpu = time.perf_counter() - started, time.process_time() - cpu
    peak_save = _status("VmHWM")
    folder = os.path.dirname(path)
    saved_bytes = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)
                      if f.startswith(os.path.basename(path) + "."))
    sync = full_sync(trainer, args.config, os.path.dirname(args.model_dir))
    width = sorted(widths.values())[-1]
    first = next(iter(slots))
    return {**sync, "rows": args.count, "tables_grown": len(share), "width": width,
            "stored_width": sorted(stored.values())[-1],
            "slot_widths": [slot.dim // widths[first] for slot in slots[first]], "statistics": any(s is not None for s in stats.values()),
            "slot_rows_grown": slot_rows, "rows_in_model": rows_after,
            "rss_before": rss_before, "rss_after": rss_after, "peak_grow": peak_grow,
            "grow_seconds": round(upsert_seconds, 3), "grow_cpu_seconds": round(upsert_cpu, 3),
            "chunk_seconds_max": round(max(chunk_seconds), 3),
            "chunk_seconds_median": round(sorted(chunk_seconds)[len(chunk_seconds) // 2], 3),
            "chunk_seconds": [round(s, 3) for s in chunk_seconds],
            "rss_before_save": rss_before_save, "peak_save": peak_save, "save_seconds": round(save_seconds, 3),
            "save_cpu_seconds": round(save_cpu, 3),
            "checkpoint_bytes": saved_bytes, "checkpoint": path,
            "samples_per_sec_empty": round(rate_empty), "samples_per_sec": round(rate_grown),
            "step_samples": len(lines)}


def tf_latest_checkpoint(model_dir: str) -> str:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    path = tf.train.latest_checkpoint(model_dir)
    assert path is not None, f"no checkpoint in {model_dir}"
    return path


def restore_child(args) -> dict:
    """Builds the trainer on an empty model_dir (its tables sized for the checkpoint's rows with
    ``--restore_sized``), then restores ``args.restore_from``'s checkpoint into it; times both."""
    import easyonline  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    from easyonline.checkpoint.checkpointer import Checkpointer  # pylint: disable=g-import-not-at-top
    from easyonline.jobs.online_train import build_trainer  # pylint: disable=g-import-not-at-top

    from easyonline.embedding.dynamic_tables import (  # pylint: disable=g-import-not-at-top
        checkpoint_tables, table_capacities)

    rss_before_build = _rss()
    _reset_hwm()
    started, cpu = time.perf_counter(), time.process_time()
    latest = tf_latest_checkpoint(args.restore_from)
    with table_capacities(checkpoint_tables(latest).rows if args.restore_sized else {}):
        trainer = build_trainer(config_for(args.config, args.optimizer, args.model_dir), online=False)
    build_seconds, build_cpu = time.perf_counter() - started, time.process_time() - cpu
    rows_empty = sum(trainer.model.tables.sizes().values())
    checkpointer = Checkpointer(args.restore_from, trainer.model, trainer.optimizer,
                                trainer.config.train_config.keep_checkpoint_max)
    rss_before = _rss()
    started, cpu = time.perf_counter(), time.process_time()
    path = checkpointer.restore_latest()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    peak = _status("VmHWM")
    rss_after = _rss()
    assert path is not None, f"no checkpoint in {args.restore_from}"
    return {"restore_seconds": round(seconds + build_seconds, 3), "restore_cpu_seconds": round(cpu + build_cpu, 3),
            "restore_build_seconds": round(build_seconds, 3),
            "restore_rss_before_build": rss_before_build, "restore_rss_before": rss_before,
            "restore_rss_after": rss_after, "restore_peak": peak,
            "rows_restored": sum(trainer.model.tables.sizes().values()) - rows_empty}


def export_dir_of(model_dir: str, kind: str) -> str:
    return f"{model_dir}_export_{kind}"


def export_child(args) -> dict:
    """Exports ``args.model_dir``'s checkpoint as ``python -m easyonline.export`` does (``export_saved_model``,
    what jobs/export_job.py calls), for the serving processor and then ``for_stock_serving``, one after the
    other in this process (the second after the first's objects are collected); times each, with its peak RSS
    above the RSS before it and the version's bytes on disk."""
    import gc  # pylint: disable=g-import-not-at-top
    from easyonline.export.exporter import export_saved_model  # pylint: disable=g-import-not-at-top

    config = config_for(args.config, args.optimizer, args.model_dir)
    out: dict = {}
    for kind in EXPORT_KINDS:
        gc.collect()
        rss_before = _rss()
        _reset_hwm()
        started, cpu = time.perf_counter(), time.process_time()
        path = export_saved_model(config, export_dir_of(args.model_dir, kind), for_stock_serving=kind == "stock")
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        out.update({f"export_{kind}_seconds": round(seconds, 3), f"export_{kind}_cpu_seconds": round(cpu, 3),
                    f"export_{kind}_rss_before": rss_before, f"export_{kind}_peak": _status("VmHWM"),
                    f"export_{kind}_bytes": dir_bytes(path), f"export_{kind}_path": path})
    return out


def serve_load_child(args) -> dict:
    """Loads ``args.export_path`` as the serving process does (``LoadedExport``) and answers one batch-1
    predict request, a line of the synthetic stream made into the export's inputs as predict_request.py makes a
    REST request; times both, with the RSS after them (after the predict) and their peak, and the RSS before."""
    from easyonline.export import serving_module  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    from easyonline.serve.loaded_export import LoadedExport  # pylint: disable=g-import-not-at-top
    from easyonline.tools.predict_request import build_request  # pylint: disable=g-import-not-at-top
    from easyonline.tools.stream_producer import SyntheticCtrStream  # pylint: disable=g-import-not-at-top

    # (serving_module imported above: build_request imports it at its first call, which is not loading the export;
    # it does not import TFRA, which a stock export's load leaves unimported)
    line = SyntheticCtrStream().lines(0, 1)[0].decode()
    rss_before = _rss()
    _reset_hwm()
    started, cpu = time.perf_counter(), time.process_time()
    export = LoadedExport(args.export_path)
    load_seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    (instance,) = build_request(export.config, [line])["instances"]  # (untimed: a client's work)
    started, predict_cpu = time.perf_counter(), time.process_time()
    out = export.predict({name: [value] for name, value in instance.items()})
    predict_seconds, cpu = time.perf_counter() - started, cpu + time.process_time() - predict_cpu
    peak = _status("VmHWM")
    rss_after = _rss()
    assert out[export.primary_output].shape[0] == 1, {k: v.shape for k, v in out.items()}
    return {"load_seconds": round(load_seconds, 3), "predict_seconds": round(predict_seconds, 4),
            "seconds": round(load_seconds + predict_seconds, 3), "cpu_seconds": round(cpu, 3),
            "rss_before": rss_before, "rss_after": rss_after, "peak": peak,
            "stock": export.for_stock_serving}


def run_child(args, mode: str, optimizer: str, count: int, model_dir: str, restore_from: str = "",
              sized: bool = True, export_path: str = "") -> dict:
    command = [sys.executable, os.path.abspath(__file__), f"--child={mode}", f"--optimizer={optimizer}",
               f"--count={count}", f"--model_dir={model_dir}", f"--config={args.config}", f"--spread={args.spread}",
               f"--batches={args.batches}", f"--passes={args.passes}", f"--restore_sized={int(sized)}"]
    if restore_from:
        command.append(f"--restore_from={restore_from}")
    if export_path:
        command.append(f"--export_path={export_path}")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run(command, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{mode} child ({optimizer}, {count:,} rows) failed ({out.returncode}):\n"
                           f"{out.stderr[-4000:]}")
    return json.loads(next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))[7:])


def theoretical_bytes(width: int, stored_width: int, slot_widths: List[int], statistics: bool) -> int:
    """Bytes a row's keys and floats take, in the table (``stored_width`` floats: the row, and Adam's m and v
    when kept beside it) and each slot table (keys repeated; ``slot_widths`` in rows' widths), and statistics."""
    return (8 + 4 * stored_width) + sum(8 + 4 * width * w for w in slot_widths) + (8 + 12 if statistics else 0)


def measure(args, optimizer: str, count: int, work: str) -> dict:
    model_dir = os.path.join(work, f"{optimizer}_{count}")
    started = time.perf_counter()
    grown = run_child(args, "grow", optimizer, count, model_dir)
    restore_dir = os.path.join(work, f"{optimizer}_{count}_restore")
    restored = run_child(args, "restore", optimizer, count, restore_dir, restore_from=model_dir)
    shutil.rmtree(restore_dir, ignore_errors=True)
    old = run_child(args, "restore", optimizer, count, restore_dir, restore_from=model_dir, sized=False)
    shutil.rmtree(restore_dir, ignore_errors=True)
    exported = run_child(args, "export", optimizer, count, model_dir)
    served = {}
    for kind in EXPORT_KINDS:
        loaded = run_child(args, "serve_load", optimizer, count, model_dir,
                           export_path=exported.pop(f"export_{kind}_path"))
        assert loaded.pop("stock") == (kind == "stock"), (kind, loaded)
        served.update({f"serve_{kind}_{k}": v for k, v in loaded.items()})
        shutil.rmtree(export_dir_of(model_dir, kind), ignore_errors=True)
    shutil.rmtree(model_dir, ignore_errors=True)
    r = {"optimizer": optimizer, **grown, **restored, **{"old_" + k: v for k, v in old.items()}, **exported,
         **served, "wall_seconds": round(time.perf_counter() - started, 1)}
    r.pop("checkpoint")
    theory = theoretical_bytes(r["width"], r["stored_width"], r["slot_widths"], r["statistics"])
    build_bytes = r["old_restore_rss_before"] - r["old_restore_rss_before_build"]
    grown_bytes = r["rss_after"] - r["rss_before"]
    r.update({
        "theoretical_bytes_per_row": theory,
        "bytes_per_row": round(grown_bytes / count, 1),
        "overhead_factor": round(grown_bytes / count / theory, 2),
        # from before the build, less what building the trainer itself takes (the empty-table child's build)
        "restored_bytes_per_row": round((r["restore_rss_after"] - r["restore_rss_before_build"] - build_bytes) / count,
                                        1),
        # peaks above the grown tables (the save's and the restore's extra memory), per theoretical byte
        "grow_peak_extra_bytes": r["peak_grow"] - r["rss_after"],
        "save_peak_extra_bytes": r["peak_save"] - r["rss_before_save"],
        "save_peak_extra_per_theoretical": round((r["peak_save"] - r["rss_before_save"]) / (count * theory), 2),
        "restore_peak_extra_bytes": r["restore_peak"] - r["restore_rss_after"],
        "restore_peak_extra_per_theoretical": round((r["restore_peak"] - r["restore_rss_after"]) / (count * theory),
                                                    2),
        "old_restore_peak_extra_bytes": r["old_restore_peak"] - r["old_restore_rss_after"],
        "restore_over_old": round(r["restore_seconds"] / r["old_restore_seconds"], 3),
        "restore_cpu_over_old": round(r["restore_cpu_seconds"] / r["old_restore_cpu_seconds"], 3),
        "sync_peak_extra_bytes": r["peak_sync"] - r["sync_rss_before"],
        **{f"export_{k}_peak_extra_bytes": r[f"export_{k}_peak"] - r[f"export_{k}_rss_before"] for k in EXPORT_KINDS},
        **{f"serve_{k}_rss_growth_bytes": r[f"serve_{k}_rss_after"] - r[f"serve_{k}_rss_before"]
           for k in EXPORT_KINDS},
        **{f"serve_{k}_peak_extra_bytes": r[f"serve_{k}_peak"] - r[f"serve_{k}_rss_before"] for k in EXPORT_KINDS},
        # every child's peak: the memory guard (estimate_peak) scales it to the next size
        "peak_rss": max(r["peak_grow"], r["peak_save"], r["peak_sync"], r["restore_peak"], r["old_restore_peak"],
                        *(r[f"export_{k}_peak"] for k in EXPORT_KINDS), *(r[f"serve_{k}_peak"] for k in EXPORT_KINDS)),
        "step_ratio_to_empty": round(r["samples_per_sec"] / r["samples_per_sec_empty"], 3),
    })
    assert r["rows_restored"] >= count and r["old_rows_restored"] == r["rows_restored"], r
    return r


def per_row_ratio(r: dict, base: dict, key: str) -> Optional[float]:
    """``key`` per row over the same optimizer's smallest size's (1.0: linear in the rows); None over a zero."""
    if not base[key]:
        return None
    return round(r[key] / r["rows"] / (base[key] / base["rows"]), 3)


def estimate_peak(count: int, done: List[dict], theory: int) -> int:
    """The next child's peak RSS, from the largest size measured for this optimizer (else a prior)."""
    if not done:
        return int(1.5 * GIB + PRIOR_FACTOR * theory * count)
    last = done[-1]
    base = last["rss_before"]
    return int(base + (last["peak_rss"] - base) / last["rows"] * count * 1.1)


def rows_text(rows: int) -> str:
    return f"{rows / 1e6:g}M" if rows >= 1_000_000 else f"{rows / 1e3:g}K"


def ratio(value: float, base: Optional[float]) -> str:
    return f"{value / base:.2f}x" if base else "-"


def print_table(runs: List[dict]) -> None:
    mib = 1 << 20
    header = (f"{'opt':<8}{'rows':>6} {'B/row':>6} {'theory':>6} {'factor':>6} {'restored B/row':>14} "
              f"{'grow s':>7} {'(/row x)':>8} {'chunk max/med s':>15} {'save s':>7} {'(/row x)':>8} "
              f"{'restore s':>9} {'(/row x)':>8} {'old s':>6} {'new/old':>7} "
              f"{'ckpt MiB':>8} {'save peak+ MiB':>14} {'restore peak+ MiB':>17} {'old':>5} {'samples/s':>9} {'(x)':>6} "
              f"{'vs empty':>8} {'peak GiB':>8}")
    print(header)
    first: Dict[str, dict] = {}
    for r in runs:
        b = first.setdefault(r["optimizer"], r)

        def per_row(key: str) -> str:
            return ratio(r[key] / r["rows"], b[key] / b["rows"])  # pylint: disable=cell-var-from-loop

        chunks = f"{r['chunk_seconds_max']:.2f}/{r['chunk_seconds_median']:.2f}"
        print(f"{r['optimizer']:<8}{rows_text(r['rows']):>6} {r['bytes_per_row']:>6.0f} "
              f"{r['theoretical_bytes_per_row']:>6} {r['overhead_factor']:>6.2f} {r['restored_bytes_per_row']:>14.0f} "
              f"{r['grow_seconds']:>7.2f} {per_row('grow_seconds'):>8} {chunks:>15} {r['save_seconds']:>7.2f} "
              f"{per_row('save_seconds'):>8} {r['restore_seconds']:>9.2f} {per_row('restore_seconds'):>8} "
              f"{r['old_restore_seconds']:>6.2f} {r['restore_over_old']:>7.2f} "
              f"{r['checkpoint_bytes'] / mib:>8.0f} {r['save_peak_extra_bytes'] / mib:>14.0f} "
              f"{r['restore_peak_extra_bytes'] / mib:>17.0f} {r['old_restore_peak_extra_bytes'] / mib:>5.0f} "
              f"{r['samples_per_sec']:>9} "
              f"{ratio(r['samples_per_sec'], b['samples_per_sec']):>6} {r['step_ratio_to_empty']:>8.2f} "
              f"{r['peak_rss'] / GIB:>8.1f}")
    print("(/row x): seconds per row over the same optimizer's smallest size (1.00x = linear); chunk max/med: the "
          "slowest and the median upsert of 1M rows (uneven: inserts slow down as a table fills, until it doubles); factor: measured B/row"
          " over theory; restore s: build + restore into tables sized for the checkpoint's rows; old: into empty "
          "tables (before they were sized); peak+: peak RSS above the grown (saving) or restored tables; (x): samples/s over the "
          "smallest size's; vs empty: over the same process's step before growth")


def _by_optimizer_base(runs: List[dict]):
    """(run, the same optimizer's smallest size's run) in order."""
    first: Dict[str, dict] = {}
    for r in runs:
        yield r, first.setdefault(r["optimizer"], r)


def _seconds_cell(r: dict, b: dict, key: str) -> str:
    """``seconds (per-row ratio to the smallest size)``, e.g. ``12.31 (1.05x)``."""
    return f"{r[key]:.2f} ({ratio(r[key] / r['rows'], b[key] / b['rows'])})"


def print_sync_export_table(runs: List[dict]) -> None:
    """A full sync and the two exports at each size: seconds (per row against the smallest), bytes, peak+."""
    mib = 1 << 20
    print(f"{'opt':<8}{'rows':>6} {'sync s (/row x)':>17} {'MiB':>6} {'peak+ MiB':>9}   "
          f"{'export s (/row x)':>17} {'MiB':>6} {'peak+ MiB':>9}   {'stock s (/row x)':>17} {'MiB':>6} "
          f"{'peak+ MiB':>9}")
    for r, b in _by_optimizer_base(runs):
        cells = [f"{_seconds_cell(r, b, 'sync_seconds'):>17} {r['sync_bytes'] / mib:>6.0f} "
                 f"{r['sync_peak_extra_bytes'] / mib:>9.0f}"]
        cells += [f"{_seconds_cell(r, b, f'export_{k}_seconds'):>17} {r[f'export_{k}_bytes'] / mib:>6.0f} "
                  f"{r[f'export_{k}_peak_extra_bytes'] / mib:>9.0f}" for k in EXPORT_KINDS]
        print(f"{r['optimizer']:<8}{rows_text(r['rows']):>6} " + "   ".join(cells))
    print("sync: a full sync of every table (UpdatePublisher -> directory sink) after the save, in the grow "
          "process; export / stock: export_saved_model, normal then for_stock_serving, in one process; MiB: "
          "bytes written; peak+: peak RSS above the RSS before it; (/row x): seconds per row over the smallest size's")


def print_serve_table(runs: List[dict]) -> None:
    """Loading each export in a serving process and its first batch-1 predict."""
    mib = 1 << 20
    print(f"{'opt':<8}{'rows':>6} " + "   ".join(
        f"{kind + ' load s (/row x)':>23} {'predict ms':>10} {'RSS+ MiB':>8} {'peak+ MiB':>9}"
        for kind in EXPORT_KINDS))
    for r, b in _by_optimizer_base(runs):
        cells = [f"{_seconds_cell(r, b, f'serve_{k}_seconds'):>23} {r[f'serve_{k}_predict_seconds'] * 1000:>10.1f} "
                 f"{r[f'serve_{k}_rss_growth_bytes'] / mib:>8.0f} {r[f'serve_{k}_peak_extra_bytes'] / mib:>9.0f}"
                 for k in EXPORT_KINDS]
        print(f"{r['optimizer']:<8}{rows_text(r['rows']):>6} " + "   ".join(cells))
    print("load s: LoadedExport(version) + its first batch-1 predict, in a process of its own; predict ms: that "
          "predict alone; RSS+: RSS after both over the RSS before; peak+: peak RSS above the RSS before")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1M,5M,10M", help="rows added to the tables, e.g. 1M,5M,10M,30M,50M")
    parser.add_argument("--optimizers", default="adam,adagrad",
                        help=f"of {','.join(OPTIMIZERS)} (FTRL has two slot tables of the row's width, Adam one of twice it)")
    parser.add_argument("--spread", choices=["one", "all"], default="one",
                        help="all rows in the first table (C1), or spread evenly over every table")
    parser.add_argument("--batches", type=int, default=30, help="batches of each timed training pass")
    parser.add_argument("--passes", type=int, default=3, help="timed passes before and after growth; the fastest")
    parser.add_argument("--max_rss_gib", type=float, default=18.0, help="largest peak RSS a child may reach")
    parser.add_argument("--config", default=os.path.join(ROOT, "samples", "online.config"))
    parser.add_argument("--child", choices=["", "grow", "restore", "export", "serve_load"], default="",
                        help=argparse.SUPPRESS)
    parser.add_argument("--optimizer", default="adam", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--model_dir", default="", help=argparse.SUPPRESS)
    parser.add_argument("--restore_from", default="", help=argparse.SUPPRESS)
    parser.add_argument("--restore_sized", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--export_path", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        from easyonline.utils.logs import setup_logging  # pylint: disable=g-import-not-at-top
        setup_logging("WARNING")
        children = {"grow": grow_child, "restore": restore_child, "export": export_child,
                    "serve_load": serve_load_child}
        result = children[args.child](args)
        print("RESULT " + json.dumps(result), flush=True)
        return
    sizes = sorted(parse_size(s) for s in args.sizes.split(","))
    optimizers = [o.strip() for o in args.optimizers.split(",") if o.strip()]
    unknown = sorted(set(optimizers) - set(OPTIMIZERS))
    if unknown:
        parser.error(f"unknown optimizers {unknown}")
    work = tempfile.mkdtemp(prefix="easyonline-table-scale-")
    runs: List[dict] = []
    stopped: List[str] = []
    started = time.perf_counter()
    try:
        for optimizer in optimizers:
            done: List[dict] = []
            for count in sizes:
                # (the demo model's width; the children report the real one)
                theory = theoretical_bytes(17, 17, SLOTS[optimizer], False)  # (slot tables of their own: the larger)
                need = estimate_peak(count, done, theory)
                room = min(int(args.max_rss_gib * GIB), mem_available() - GIB)
                if need > room:
                    reason = (f"{optimizer} at {count:,} rows: estimated peak {need / GIB:.1f} GiB > room "
                              f"{room / GIB:.1f} GiB (min of --max_rss_gib {args.max_rss_gib} and MemAvailable "
                              f"less 1 GiB); stopping this optimizer's sizes here")
                    print(reason, flush=True)
                    stopped.append(reason)
                    break
                print(f"{optimizer} {count:,} rows (estimated peak {need / GIB:.1f} GiB)...", file=sys.stderr,
                      flush=True)
                done.append(measure(args, optimizer, count, work))
                runs.append(done[-1])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    bases: Dict[str, dict] = {}
    for r in runs:
        b = bases.setdefault(r["optimizer"], r)
        r["ratios_to_smallest"] = {
            "bytes_per_row": round(r["bytes_per_row"] / b["bytes_per_row"], 3),
            **{f"{key}_per_row": per_row_ratio(r, b, key)
               for key in ("grow_seconds", "save_seconds", "restore_seconds", "old_restore_seconds", "grow_cpu_seconds",
                           "save_cpu_seconds",
                           "restore_cpu_seconds", "checkpoint_bytes",
                           "save_peak_extra_bytes", "restore_peak_extra_bytes",
                           "sync_seconds", "sync_cpu_seconds", "sync_bytes", "sync_peak_extra_bytes",
                           *(f"export_{k}_{f}" for k in EXPORT_KINDS
                             for f in ("seconds", "cpu_seconds", "bytes", "peak_extra_bytes")),
                           *(f"serve_{k}_{f}" for k in EXPORT_KINDS
                             for f in ("seconds", "load_seconds", "cpu_seconds", "rss_growth_bytes",
                                       "peak_extra_bytes")))},
            "samples_per_sec": round(r["samples_per_sec"] / b["samples_per_sec"], 3),
        }
    print(json.dumps({"model": os.path.basename(args.config), "spread": args.spread,
                      "checkpoint_path": "trainer.save_checkpoint / Checkpointer.restore_latest (the project's)",
                      "sync_path": "UpdatePublisher full sync of trainer.table_rows() to a DirectorySink (the "
                                   "publishing callback's), in the grow process after its save",
                      "export_path": "exporter.export_saved_model, normal then for_stock_serving, in one process",
                      "serve_path": "serve.loaded_export.LoadedExport + one batch-1 predict, a process per export",
                      "rss": "VmRSS after malloc_trim(0), each size in its own processes",
                      "step": f"the fastest of {args.passes} passes over {args.batches} batches of the synthetic "
                              "stream, trainer.engine.train_and_count",
                      "seconds": round(time.perf_counter() - started, 1), "stopped": stopped, "runs": runs}))
    print()
    print_table(runs)
    print()
    print_sync_export_table(runs)
    print()
    print_serve_table(runs)
    for reason in stopped:
        print(reason)


if __name__ == "__main__":
    main()
