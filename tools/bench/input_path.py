"""Benchmark: CPU per sample of the Kafka reader's work, compiled decoders against Python/numpy, same run.

What the trainer's reader process does for every batch, in this process and
nothing else running: fetch from the local broker and decode the records
(``KafkaInput``), then parse the CSV lines into id/dense/label arrays
(``VectorCsvParser``). Measured once with the compiled decoders
(``_record_decoder.c``, ``_csv_decoder.c``) and once with the Python record
decoder and the numpy parser, which run where no C compiler built them,
and once with confluent-kafka reading (``kafka_train_input.client:
CONFLUENT_KAFKA``) and the compiled parser. On two cores this CPU comes out
of the training step (online_throughput.py).

The last row is the reader process as the trainer runs it
(``KafkaReaderProcess``, confluent-kafka, compiled parser): its whole CPU per
sample, hand-over into shared memory and the process's own overheads (its
garbage collector, its queue's feeder thread) included, and the trainer
side's CPU to take the batches.

    .venv/bin/python tools/bench/input_path.py [--samples 102400] [--lines_per_message 1]
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from easyonline.config import load_pipeline_config  # noqa: E402
from easyonline.features.feature_spec import build_feature_specs  # noqa: E402
from easyonline.features.vector_csv import VectorCsvParser, native_available  # noqa: E402
from easyonline.inputs import fast_records  # noqa: E402
from easyonline.inputs.kafka_input import KafkaInput  # noqa: E402
from easyonline.inputs.reader_process import KafkaReaderProcess  # noqa: E402
from easyonline.protos import pipeline_pb2  # noqa: E402
from easyonline.tools.local_broker import LocalBroker  # noqa: E402
from easyonline.tools.stream_producer import SyntheticCtrStream, produce  # noqa: E402
from easyonline.utils.child_process import process_cpu_seconds  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BATCH_SIZE = 1024


def read_and_parse(kafka: pipeline_pb2.KafkaInput, parser: VectorCsvParser, samples: int, compiled: bool):
    """(reading us/sample, parsing us/sample) of process CPU time over the whole topic."""
    source = KafkaInput(kafka, BATCH_SIZE, 500, compiled_decoder=compiled)
    read = parse = 0.0
    got = 0
    try:
        while got < samples:
            start = time.process_time()
            batch = source.next_batch(2.0)
            middle = time.process_time()
            if batch is None:
                raise RuntimeError(f"the topic ended after {got} of {samples} samples")
            if parser.parse_blob(batch.lines.blob, len(batch.lines)) is None:  # as the reader process parses
                raise RuntimeError("the parser declined a batch of the synthetic stream")
            read += middle - start
            parse += time.process_time() - middle
            got += len(batch.lines)
    finally:
        source.close()
    return read / got * 1e6, parse / got * 1e6


def reader_process(kafka: pipeline_pb2.KafkaInput, parser: VectorCsvParser, samples: int):
    """(reader process us/sample, taking process us/sample), after a first batch (start-up excluded)."""
    source = KafkaReaderProcess(kafka, BATCH_SIZE, 500, vector_parser=parser)
    got, first = 0, None
    try:
        while got < samples:
            batch = source.next_batch(2.0)
            if batch is None or batch.parsed is None:
                raise RuntimeError(f"no parsed batch after {got} of {samples} samples")
            if first is None:
                first = (process_cpu_seconds(source.pid), time.process_time(), got)
            got += batch.parsed.size
        reader, taker = process_cpu_seconds(source.pid) - first[0], time.process_time() - first[1]
    finally:
        source.close()
    counted = got - first[2]
    return reader / counted * 1e6, taker / counted * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=102400)
    parser.add_argument("--lines_per_message", type=int, default=1)
    args = parser.parse_args()
    if not (native_available() and fast_records.native_available()):
        sys.exit("the compiled decoders were not built (see setup.py); nothing to compare")
    specs = build_feature_specs(load_pipeline_config(os.path.join(ROOT, "samples", "online.config")))
    lines = SyntheticCtrStream().lines(0, args.samples)
    results = {}
    with LocalBroker() as broker:
        broker.create_topic("bench", 2)
        produce(broker.bootstrap, "bench", [lines], lines_per_message=args.lines_per_message, partitions=2)
        kafka = pipeline_pb2.KafkaInput(server=broker.bootstrap, topic="bench")
        read_and_parse(kafka, VectorCsvParser(specs), BATCH_SIZE * 4, True)  # warm-up: connections, page cache
        confluent = pipeline_pb2.KafkaInput(server=broker.bootstrap, topic="bench",
                                            client=pipeline_pb2.KafkaInput.CONFLUENT_KAFKA)
        for name, compiled, source in (("compiled", True, kafka), ("python_numpy", False, kafka),
                                       ("confluent_kafka", True, confluent)):
            if source is confluent:  # its own warm-up, here: process CPU counts every thread of the process
                read_and_parse(confluent, VectorCsvParser(specs), BATCH_SIZE * 4, True)
            read, parse = read_and_parse(source, VectorCsvParser(specs, native=compiled), args.samples, compiled)
            results[name] = {"read_us_per_sample": round(read, 2), "parse_us_per_sample": round(parse, 2),
                             "total_us_per_sample": round(read + parse, 2)}
        reader, taker = reader_process(confluent, VectorCsvParser(specs), args.samples)
        process = {"reader_process_us_per_sample": round(reader, 2), "taking_us_per_sample": round(taker, 2)}
    saving = results["python_numpy"]["total_us_per_sample"] / results["compiled"]["total_us_per_sample"]
    print(json.dumps({"samples": args.samples, "lines_per_message": args.lines_per_message, **results,
                      "python_numpy_to_compiled": round(saving, 2), "reader_process": process}))
    print()
    print(f"{'decoders':<16} {'fetch+decode':>13} {'parse':>8} {'total':>8}   (CPU us per sample)")
    for name, r in results.items():
        print(f"{name:<16} {r['read_us_per_sample']:>13.2f} {r['parse_us_per_sample']:>8.2f} "
              f"{r['total_us_per_sample']:>8.2f}")
    print(f"the Python/numpy path costs {saving:.1f} times the compiled one")
    print(f"reader process (confluent_kafka, compiled): {reader:.2f} us of its CPU per sample, "
          f"and {taker:.2f} us of the taking process's")


if __name__ == "__main__":
    main()
