"""Benchmark: samples/s of online training from the broker vs from in-memory arrays, same run.

DeepFM, 26 categorical + 13 numeric fields, embedding dim 16, batch 1024
(samples/online.config). The same samples are first trained from arrays
already in memory (the ceiling: only the training step), then streamed
through the local broker and trained by OnlineTrainer (Kafka polling,
CSV parsing, training, status, checkpoint at the end), each on a fresh model.
Prints JSON and a table; the ratio is broker / memory.

The memory runs train with the step the broker runs use (the id and dense
matrices whole, ``OnlineTrainer.train_vectors``), so the ratio is what the
input path costs. Each memory run also times the per-feature step
(``train_batch`` of CsvParser's tensors), the baseline of the figures
before 2026-11-26 (``ratio_to_feature_step``), which is slower.

``--multitask``: samples/online_multitask.config instead (MMoE, two labels,
the same features) on the stream with conversions. ``--compare_csv_parser``:
each round runs the broker twice, once with the reader process parsing into
arrays (the default) and once with it leaving the lines to CsvParser on the
trainer (the path configs the arrays did not carry took), in alternating
order, and reports their ratio; the per-feature memory runs are left out.
``--sequence``: online.config plus a behaviour sequence of up to 20 ids
(``hist``, a SequenceFeature sharing C1's table, read by a target attention
on C1; 0-25 ids a sample, so some are cut) and a weighted tag (``wtags``,
1-5 "id:weight" values), appended to each line of the same stream.

    .venv/bin/python tools/bench/online_throughput.py [--samples 300000] [--rounds 3] [--lines_per_message 1]
        [--multitask | --sequence] [--compare_csv_parser]
"""
import argparse
import json
import statistics
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import easyonline  # noqa: E402,F401
from easyonline.config import load_pipeline_config  # noqa: E402
from easyonline.tools.local_broker import LocalBroker  # noqa: E402
from easyonline.tools.stream_producer import SyntheticCtrStream, produce  # noqa: E402
from easyonline.utils.logs import setup_logging  # noqa: E402
from easyonline.inputs.reader_process import KafkaReaderProcess  # noqa: E402
from easyonline.tools import throughput  # noqa: E402
from easyonline.tools.throughput import throughput_config  # noqa: E402
from easyonline.utils.alternating_runs import alternate, neighbour_ratios  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BATCH_SIZE = 1024  # samples/online.config's


EDITS = {}  # train_config fields set from the command line (thread counts)
CLIENT = ["CONFLUENT_KAFKA"]  # kafka_train_input.client of the broker runs (--client)
SAMPLE = ["online.config"]  # the sample config (--multitask: online_multitask.config)
SEQUENCE = [False]  # --sequence: a history and a weighted tag added to the config and the lines

SEQUENCE_FIELDS = '''
  input_fields { input_name: "hist" input_type: STRING }
  input_fields { input_name: "wtags" input_type: STRING }
'''
SEQUENCE_FEATURES = '''
  feature_configs { input_names: "hist" feature_type: SequenceFeature separator: "|" embedding_dim: 16
                    embedding_name: "C1" sequence_length: 20 }
  feature_configs { input_names: "wtags" feature_type: TagFeature separator: "|" kv_separator: ":"
                    embedding_dim: 16 }
'''


def add_sequence(config) -> None:
    """online.config plus ``hist`` (a target attention on C1 reads it) and ``wtags`` (in the FM and DNN)."""
    from google.protobuf import text_format  # pylint: disable=g-import-not-at-top
    text_format.Merge(SEQUENCE_FIELDS, config.data_config)
    text_format.Merge(SEQUENCE_FEATURES, config)
    names = [f.feature_name or f.input_names[0] for f in config.feature_configs if f.input_names[0] != "hist"]
    group = config.model_config.feature_groups.add(group_name="all", feature_names=names)
    group.wide_deep = group.WIDE_AND_DEEP
    attention = group.sequence_features.add(group_name="hist")
    attention.seq_att_map.add(key=["C1"], hist_seq=["hist"])
    attention.seq_dnn.hidden_units.extend([32, 1])


def sequence_lines(lines):
    """Each line with a history of 0-25 C1-like ids and 1-5 weighted tags appended."""
    import numpy as np  # pylint: disable=g-import-not-at-top
    rng = np.random.default_rng(7)
    out = []
    for line in lines:
        history = "|".join(f"{v:08x}" for v in rng.integers(0, 5000, int(rng.integers(0, 26))))
        tags = "|".join(f"t{int(t)}:{int(w) / 10}" for t, w in zip(rng.integers(0, 200, int(rng.integers(1, 6))),
                                                                   rng.integers(1, 30, 5)))
        out.append(line + f",{history},{tags}".encode())
    return out


def config_for(model_dir, server="", topic=""):
    config = load_pipeline_config(os.path.join(ROOT, "samples", SAMPLE[0]))
    if SEQUENCE[0]:
        add_sequence(config)
    for field, value in EDITS.items():
        setattr(config.train_config, field, value)
    # Publishing has its own benchmark (incremental_publish.py); the memory baseline does not publish.
    return throughput_config(config, model_dir, server, topic, CLIENT[0])


def from_memory(work, lines, batch_size, matrices: bool = True):
    """Samples/s of the training step alone; ``matrices``: the step the broker runs use, else the
    per-feature step."""
    return throughput.from_memory(config_for(os.path.join(work, f"memory_{time.time()}")), lines, batch_size,
                                  matrices)


def from_broker(work, broker, topic, arrays: bool = True):
    """Samples/s from the broker; ``arrays`` False: the reader process leaves parsing to CsvParser."""
    config = config_for(os.path.join(work, f"broker_{time.time()}"), broker.bootstrap, topic)
    data = config.data_config
    source = None if arrays else KafkaReaderProcess(config.kafka_train_input, data.batch_size,
                                                    data.batch_timeout_ms, max_message_bytes=data.max_message_bytes)
    return throughput.from_broker(config, source)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=300000)
    parser.add_argument("--lines_per_message", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="broker runs, each between two memory runs")
    parser.add_argument("--intra_op_threads", type=int, default=None, help="default: the sample config's")
    parser.add_argument("--client", default="CONFLUENT_KAFKA", choices=["KAFKA_PYTHON", "CONFLUENT_KAFKA"],
                        help="kafka_train_input.client of the broker runs (default: the config's default)")
    parser.add_argument("--inter_op_threads", type=int, default=None, help="default: the sample config's")
    parser.add_argument("--multitask", action="store_true",
                        help="samples/online_multitask.config (MMoE, two labels) on the stream with conversions")
    parser.add_argument("--sequence", action="store_true",
                        help="online.config plus a 20-long behaviour sequence (target attention) and a weighted tag")
    parser.add_argument("--compare_csv_parser", action="store_true",
                        help="each round also runs the broker with CsvParser parsing on the trainer (no arrays), "
                             "the two in alternating order; reports arrays / CsvParser")
    args = parser.parse_args()
    CLIENT[0] = args.client
    SAMPLE[0] = "online_multitask.config" if args.multitask else "online.config"
    SEQUENCE[0] = args.sequence
    EDITS.update({k: getattr(args, k) for k in ("intra_op_threads", "inter_op_threads")
                  if getattr(args, k) is not None})
    setup_logging("WARNING")
    work = tempfile.mkdtemp(prefix="easyonline-bench-")
    # Whole batches only: an offline run's last, partial batch waits batch_timeout_ms for samples
    # that never come, a pause of the benchmark's making that a stream in production does not have.
    args.samples = -(-args.samples // BATCH_SIZE) * BATCH_SIZE
    lines = SyntheticCtrStream(conversions=args.multitask).lines(0, args.samples)
    if args.sequence:
        lines = sequence_lines(lines)
    with LocalBroker() as broker:
        broker.create_topic("bench", args.partitions)
        produce(broker.bootstrap, "bench", [lines], lines_per_message=args.lines_per_message,
                partitions=args.partitions)
        results, csv_results = [], []

        def broker_run() -> float:
            if not args.compare_csv_parser:
                results.append(from_broker(work, broker, "bench"))
                return results[-1][0]
            # both paths back to back, the arrays first in even rounds, CsvParser first in odd ones
            order = (True, False) if len(results) % 2 == 0 else (False, True)
            for arrays in order:
                (results if arrays else csv_results).append(from_broker(work, broker, "bench", arrays))
            return results[-1][0]

        feature_step_rates = []

        def memory_run() -> float:
            if not args.compare_csv_parser:
                feature_step_rates.append(from_memory(work, lines, BATCH_SIZE, matrices=False))
            return from_memory(work, lines, BATCH_SIZE)

        memory_rates, broker_rates, ratios = alternate(memory_run, broker_run, args.rounds)
    waits = [waited for _, waited, _, _ in results]
    summary = results[-1][2]
    ratio = statistics.median(ratios)
    memory_rate, broker_rate = statistics.median(memory_rates), statistics.median(broker_rates)
    result = {
        "model": "mmoe" if args.multitask else "deepfm+sequence" if args.sequence else "deepfm", "labels": 2 if args.multitask else 1,
        "categorical_fields": 26, "numeric_fields": 13, "embedding_dim": 16, "batch_size": 1024,
        "samples": args.samples, "lines_per_message": args.lines_per_message, "partitions": args.partitions,
        "client": args.client,
        "memory_samples_per_sec": round(memory_rate), "memory_runs": [round(r) for r in memory_rates],
        "broker_samples_per_sec": round(broker_rate), "broker_runs": [round(r) for r in broker_rates],
        "ratio_broker_to_memory": round(ratio, 3), "ratios": [round(r, 3) for r in ratios],
        "broker_input_wait_share": [round(w, 3) for w in waits],
        "broker_trainer_cpu_us_per_sample": [round(r[3], 1) for r in results],
        "broker_run_samples": summary.samples, "broker_run_auc": round(summary.auc, 4),
        "broker_run_task_aucs": {task: round(figures["auc"], 4) for task, figures in summary.tasks.items()
                                 if figures.get("auc") is not None},
        "targets": {"ratio_at_least": 0.86, "broker_samples_per_sec_at_least": 10000},
    }
    if feature_step_rates:
        feature_step_ratios = neighbour_ratios(feature_step_rates, broker_rates)
        result.update({"feature_step_runs": [round(r) for r in feature_step_rates],
                       "ratio_to_feature_step": round(statistics.median(feature_step_ratios), 3),
                       "ratios_to_feature_step": [round(r, 3) for r in feature_step_ratios]})
    if csv_results:
        csv_rates = [rate for rate, _, _, _ in csv_results]
        csv_ratios = neighbour_ratios(memory_rates, csv_rates)
        arrays_over_csv = [a / c for a, c in zip(broker_rates, csv_rates)]
        result.update({"csv_parser_broker_runs": [round(r) for r in csv_rates],
                       "csv_parser_ratios": [round(r, 3) for r in csv_ratios],
                       "ratio_csv_parser_broker_to_memory": round(statistics.median(csv_ratios), 3),
                       "csv_parser_input_wait_share": [round(w, 3) for _, w, _, _ in csv_results],
                       "csv_parser_trainer_cpu_us_per_sample": [round(r[3], 1) for r in csv_results],
                       "arrays_over_csv_parser": [round(r, 3) for r in arrays_over_csv],
                       "ratio_arrays_to_csv_parser": round(statistics.median(arrays_over_csv), 3)})
    print(json.dumps(result))
    print()
    print(f"{'source':<10} {'samples/s (median)':>18}   runs")
    print(f"{'memory':<10} {memory_rate:>18.0f}   {', '.join(f'{r:.0f}' for r in memory_rates)}")
    if feature_step_rates:
        print(f"{'(features)':<10} {statistics.median(feature_step_rates):>18.0f}   "
              f"{', '.join(f'{r:.0f}' for r in feature_step_rates)}   "
              "(the per-feature step, before 2026-11-26's baseline)")
    print(f"{'broker':<10} {broker_rate:>18.0f}   {', '.join(f'{r:.0f}' for r in broker_rates)}   "
          f"(waiting for input {', '.join(f'{w:.0%}' for w in waits)} of the time; trainer CPU "
          f"{', '.join(f'{r[3]:.1f}' for r in results)} us/sample)")
    if csv_results:
        print(f"{'(CsvParser)':<10} {statistics.median(csv_rates):>17.0f}   {', '.join(f'{r:.0f}' for r in csv_rates)}"
              f"   (waiting for input {', '.join(f'{w:.0%}' for _, w, _, _ in csv_results)} of the time; trainer CPU "
              f"{', '.join(f'{r[3]:.1f}' for r in csv_results)} us/sample)")
    print(f"ratio broker/memory (median of {len(ratios)}: {', '.join(f'{r:.3f}' for r in ratios)}): {ratio:.3f} "
          f"(target >= 0.86); broker >= 10000/s: {'yes' if broker_rate >= 10000 else 'NO'}")
    if feature_step_rates:
        print(f"ratio broker/per-feature step (median): {result['ratio_to_feature_step']:.3f}")
    if csv_results:
        print(f"ratio CsvParser broker/memory (median): {result['ratio_csv_parser_broker_to_memory']:.3f}; "
              f"arrays/CsvParser, same round (median of {', '.join(f'{r:.3f}' for r in arrays_over_csv)}): "
              f"{result['ratio_arrays_to_csv_parser']:.3f}")


if __name__ == "__main__":
    main()
