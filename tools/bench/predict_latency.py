"""Benchmark: where a served predict's time goes, packed input against one tensor per input, in one run.

DeepFM from samples/online.config (all 39 of Criteo's fields: 13 numbers, 26
ids) trains 20,000 synthetic samples from a file and is exported. The export is
loaded twice in this process: as ``easyonline.serve`` loads it (``serve_packed``:
one [inputs, rows] tensor per dtype) and as an export made before
``serve_packed`` existed is served (one tensor per input, the named function).
Both answer the same requests, decoded as the REST API decodes them, in
alternating rounds, so machine noise falls on both alike; each round times
``--requests`` predicts of batch 1 and of batch 100. Also timed: the graph
alone (the packed function on tensors made beforehand), which no input
handling can cut, and the same batch-1 requests through ``python -m
easyonline.serve``'s REST API on one keep-alive connection (JSON "instances"
rows; nothing else running), what a client sees. And the floor under all of
them on this machine: a traced function of one addition, called as the
export's are, and one eager op.

    .venv/bin/python tools/bench/predict_latency.py [--requests 2000] [--rounds 3]

Prints a JSON line and a table; asserts both paths answer the same numbers.
"""
import argparse
import http.client
import itertools
import json
import os
import sys
import tempfile
import time
from typing import Callable, Dict, List, Tuple

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import easyonline  # noqa: E402,F401  (sets TF_USE_LEGACY_KERAS first)
from easyonline.core.bootstrap import ensure_legacy_keras  # noqa: E402
from easyonline.core.flat_call import flat_call  # noqa: E402
from easyonline.serve.loaded_export import LoadedExport  # noqa: E402
from easyonline.serve.process import ServingProcess  # noqa: E402
from easyonline.tools.sample_export import requests, trained_export  # noqa: E402
from easyonline.utils.child_process import process_cpu_seconds  # noqa: E402

tf = ensure_legacy_keras()


def percentiles_ms(call: Callable[[], None], count: int) -> Dict[str, float]:
    """p50/p99 in ms of ``count`` calls, and the process CPU per call."""
    times = []
    cpu = time.process_time()
    for _ in range(count):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    cpu = (time.process_time() - cpu) / count
    ms = np.array(times) * 1e3
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)), "cpu_ms": cpu * 1e3}


def http_latency(version: str, work: str, one: List[Dict[str, list]], count: int, rounds: int) -> List[dict]:
    """Batch-1 predicts through ``python -m easyonline.serve``'s REST API on one keep-alive connection: the
    client's time (the request's JSON written and the answer's read), and the server's CPU per request."""
    server = ServingProcess(os.path.dirname(version), os.path.join(work, "serve.log"), "--log_level=WARNING",
                            model_name="model")
    try:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        bodies = [json.dumps({"instances": [{name: values[0] for name, values in r.items()}]}).encode()
                  for r in one]
        nxt = itertools.cycle(bodies).__next__

        def predict():
            connection.request("POST", "/v1/models/model:predict", body=nxt(),
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            assert response.status == 200, response.read()[:300]
            response.read()
        for _ in range(100):
            predict()
        out = []
        for _ in range(rounds):
            cpu = process_cpu_seconds(server.proc.pid)
            figures = percentiles_ms(predict, count)
            figures["server_cpu_ms"] = (process_cpu_seconds(server.proc.pid) - cpu) / count * 1e3
            out.append(figures)
        return out
    finally:
        server.stop()


def runtime_floor() -> Tuple[Callable[[], None], Callable[[], None]]:
    """What any served graph costs on this machine before its own work: a traced function computing ``x + 1``
    of one number, called flat as the export's are (TensorFlow's function call: its executor, its thread pool's
    hand-offs), and one eager op on the same number."""
    x = tf.constant([1.0])
    traced = flat_call(tf.function(lambda v: v + 1.0).get_concrete_function(tf.TensorSpec([1], tf.float32)))
    return (lambda: traced(x)), (lambda: tf.raw_ops.AddV2(x=x, y=x))


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="batch-1 predicts a round per path")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (packed, per input)")
    parser.add_argument("--train_samples", type=int, default=20000)
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="easyonline-predict-latency-")
    version = trained_export(work, args.train_samples)
    packed = LoadedExport(version)
    per_input = LoadedExport(version)
    assert packed._packed_call is not None, "the export lacks serve_packed"  # pylint: disable=protected-access
    per_input._packed_call = None  # pylint: disable=protected-access  (served as an export without serve_packed)
    one = requests(packed, 1, 200)
    hundred = requests(packed, 100, 20)
    for request in one[:20] + hundred[:3]:  # the same answers, bit for bit
        a, b = packed.predict(request), per_input.predict(request)
        assert all(np.array_equal(a[name], b[name]) for name in a), "the two paths answer differently"
    for request in one[:50]:  # warm both
        packed.predict(request)
        per_input.predict(request)
    groups = sorted(packed._packing.items())  # pylint: disable=protected-access
    flat = [{dtype: packed._packed_tensor(dtype, names, r) for dtype, names in groups} for r in one]  # pylint: disable=protected-access
    runs: Dict[str, List[dict]] = {key: [] for key in ("packed_1", "per_input_1", "packed_100", "per_input_100",
                                                       "graph_only_1", "floor_function", "floor_op")}
    floor_function, floor_op = runtime_floor()
    for _ in range(args.rounds):
        for name, export in (("packed", packed), ("per_input", per_input)):
            nxt1, nxt100 = itertools.cycle(one).__next__, itertools.cycle(hundred).__next__
            runs[f"{name}_1"].append(percentiles_ms(lambda: export.predict(nxt1()), args.requests))
            runs[f"{name}_100"].append(percentiles_ms(lambda: export.predict(nxt100()), args.requests // 10))
        tensors = itertools.cycle(flat).__next__
        runs["graph_only_1"].append(percentiles_ms(lambda: packed._packed_call(tensors()),  # pylint: disable=protected-access
                                                   args.requests))
        runs["floor_function"].append(percentiles_ms(floor_function, args.requests))
        runs["floor_op"].append(percentiles_ms(floor_op, args.requests))
    runs["http_1"] = http_latency(version, work, one, args.requests, args.rounds)
    median = {key: {stat: float(np.median([r[stat] for r in values])) for stat in values[0]}
              for key, values in runs.items()}
    result = {"inputs": len(packed.inputs), "requests": args.requests, "rounds": args.rounds, "median": median,
              "runs": runs, "batch1_p50_speedup": median["per_input_1"]["p50_ms"] / median["packed_1"]["p50_ms"]}
    print(json.dumps(result))
    print(f"\npredict latency in process, {len(packed.inputs)} inputs, medians of {args.rounds} alternating rounds")
    print(f"{'path':<28}{'p50 ms':>9}{'p99 ms':>9}{'CPU ms':>9}")
    for key, label in (("per_input_1", "one tensor per input, b=1"), ("packed_1", "packed (serve_packed), b=1"),
                       ("per_input_100", "one tensor per input, b=100"), ("packed_100", "packed, b=100"),
                       ("graph_only_1", "graph alone, b=1"), ("http_1", "REST API, keep-alive, b=1"),
                       ("floor_function", "floor: traced x + 1"), ("floor_op", "floor: one eager op")):
        m = median[key]
        print(f"{label:<28}{m['p50_ms']:>9.3f}{m['p99_ms']:>9.3f}{m['cpu_ms']:>9.3f}")
    print(f"batch-1 p50: packed is {result['batch1_p50_speedup']:.2f}x faster")
    return result


if __name__ == "__main__":
    main()
