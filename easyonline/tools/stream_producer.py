"""A synthetic CTR stream in Criteo shape (label, I1..I13, C1..C26) for demos, tests and benchmarks.

Labels come from a hidden logistic model: each id of an informative
categorical feature has a weight, plus a linear term on the numerics. New ids
keep appearing (the id space of each feature grows with time) and at
``drift_at`` the hidden weights are redrawn, so a model frozen at that point
goes stale while an online model recovers. Sample ``i`` is the same for a
given seed wherever it is generated.

    python -m easyonline.tools.stream_producer --bootstrap 127.0.0.1:9092 --topic samples \
        --samples 200000 --rate 5000 --drift_at 100000
"""
import logging
import time
from typing import Iterator, List, Optional

import numpy as np
from absl import flags

from easyonline.utils.cli import run_command

log = logging.getLogger(__name__)
NUM_NUMERIC = 13
NUM_CATEGORICAL = 26
_SAMPLE_BLOCK = 1000  # samples are generated in seeded blocks: sample i never depends on how it was asked for
_ID_BLOCK = 4096


def input_field_names(conversions: bool = False) -> List[str]:
    """The fields of a line: label, (buy,) I1..I13, C1..C26."""
    return ["label"] + (["buy"] if conversions else []) + [f"I{i}" for i in range(1, NUM_NUMERIC + 1)] + \
        [f"C{i}" for i in range(1, NUM_CATEGORICAL + 1)]


class SyntheticCtrStream:
    """Deterministic generator of CSV lines; ``lines(start, count)``.

    ``conversions``: a second label after the click, ``buy`` (a conversion: only ever after a click, on a
    third of C1's ids), for two-task models (samples/online_multitask.config).
    """

    def __init__(self, seed: int = 7, drift_at: Optional[int] = None, informative: int = 12,
                 base_vocab: int = 500, new_ids_per_10k: int = 20, id_weight_std: float = 0.9,
                 bias: float = -1.0, vocab_skew: float = 1.6, conversions: bool = False):
        self.conversions = conversions
        self.seed = seed
        self.drift_at = drift_at
        self.informative = informative
        self.base_vocab = base_vocab
        self.new_ids_per_10k = new_ids_per_10k
        self.id_weight_std = id_weight_std
        self.bias = bias
        self.vocab_skew = vocab_skew
        self._weights = {}

    def _vocab_at(self, index: np.ndarray) -> np.ndarray:
        return self.base_vocab + (index * self.new_ids_per_10k) // 10000

    def _id_weights(self, concept: int, max_id: int) -> np.ndarray:
        """Hidden weights [26, >max_id]; built from fixed seeded blocks, so they never depend on call order."""
        blocks = self._weights.setdefault(concept, [])
        while len(blocks) * _ID_BLOCK <= max_id:
            rng = np.random.default_rng([self.seed, 1000 + concept, len(blocks)])
            block = rng.normal(0, self.id_weight_std, size=(NUM_CATEGORICAL, _ID_BLOCK))
            block[self.informative:] = 0.0
            blocks.append(block)
        return np.concatenate(blocks, axis=1)

    def _numeric_weights(self, concept: int) -> np.ndarray:
        return np.random.default_rng([self.seed, 2000 + concept]).normal(0, 0.4, size=NUM_NUMERIC)

    def _block(self, block: int):
        index = np.arange(block * _SAMPLE_BLOCK, (block + 1) * _SAMPLE_BLOCK, dtype=np.int64)
        rng = np.random.default_rng([self.seed, block])
        vocab = self._vocab_at(index)
        u = rng.random((len(index), NUM_CATEGORICAL))
        cats = np.minimum((vocab[:, None] * u ** self.vocab_skew).astype(np.int64), vocab[:, None] - 1)
        numerics = np.round(rng.normal(0, 1, size=(len(index), NUM_NUMERIC)), 3)
        logits = np.full(len(index), self.bias)
        concepts = np.zeros(len(index), np.int64) if self.drift_at is None else (index >= self.drift_at).astype(np.int64)
        for concept in np.unique(concepts):
            rows = concepts == concept
            ids = self._id_weights(int(concept), int(vocab.max()))
            logits[rows] += ids[np.arange(NUM_CATEGORICAL)[None, :], cats[rows]].sum(axis=1)
            logits[rows] += numerics[rows] @ self._numeric_weights(int(concept))
        labels = (rng.random(len(index)) < 1.0 / (1.0 + np.exp(-logits))).astype(np.int64)
        return labels, numerics, cats

    def arrays(self, start: int, count: int):
        """(labels [n], numerics [n, 13], categorical id indices [n, 26]) of samples start..start+count-1."""
        first, last = start // _SAMPLE_BLOCK, (start + count - 1) // _SAMPLE_BLOCK
        parts = [self._block(b) for b in range(first, last + 1)]
        offset = start - first * _SAMPLE_BLOCK
        return tuple(np.concatenate([p[k] for p in parts])[offset:offset + count] for k in range(3))

    def lines(self, start: int, count: int) -> List[bytes]:
        labels, numerics, cats = self.arrays(start, count)
        heads = [f"{c},{b}" for c, b in zip(labels, labels * (cats[:, 0] % 3 == 0))] if self.conversions \
            else [str(c) for c in labels]
        out = []
        for i in range(count):
            num = ",".join(f"{v:g}" for v in numerics[i])
            cat = ",".join(f"{j}_{cats[i, j]:x}" for j in range(NUM_CATEGORICAL))
            out.append(f"{heads[i]},{num},{cat}".encode())
        return out

    def chunks(self, start: int, count: int, chunk: int = 5000) -> Iterator[List[bytes]]:
        for begin in range(start, start + count, chunk):
            yield self.lines(begin, min(chunk, start + count - begin))


def produce(bootstrap: str, topic: str, lines, rate: Optional[float] = None, lines_per_message: int = 1,
            partitions: Optional[int] = None, timestamp_ms: Optional[int] = None, producer=None,
            progress_secs: float = 0) -> int:
    """Sends lines (an iterable of lists) to topic, round-robin over partitions; returns messages sent.

    ``progress_secs`` > 0: logs the samples sent and the rate that often."""
    from kafka import KafkaProducer  # pylint: disable=g-import-not-at-top
    own = producer is None
    producer = producer or KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=256 * 1024,
                                         acks=1, max_request_size=8 * 1024 * 1024)
    sent = samples = 0
    started = time.time()
    next_progress = started + progress_secs
    for chunk in lines:
        if progress_secs and time.time() >= next_progress:
            next_progress = time.time() + progress_secs
            log.info("sent %d samples to %s (%.0f/s)", samples, topic, samples / max(time.time() - started, 1e-9))
        for i in range(0, len(chunk), lines_per_message):
            value = b"\n".join(chunk[i:i + lines_per_message])
            partition = None if partitions is None else sent % partitions
            producer.send(topic, value, partition=partition, timestamp_ms=timestamp_ms)
            sent += 1
            samples += len(chunk[i:i + lines_per_message])
            if rate:
                ahead = samples / rate - (time.time() - started)
                if ahead > 0:
                    time.sleep(ahead)
    producer.flush()
    if own:
        producer.close()
    return sent


def define_flags() -> None:
    """Defined on demand, so importing this module never clashes with other commands' flags."""
    flags.DEFINE_string("bootstrap", "127.0.0.1:9092", "Kafka bootstrap servers.")
    flags.DEFINE_string("topic", "samples", "Topic to write to.")
    flags.DEFINE_integer("samples", 100000, "Number of samples to send.")
    flags.DEFINE_integer("start", 0, "Index of the first sample (the stream is deterministic per index).")
    flags.DEFINE_float("rate", 0, "Samples per second (0: as fast as possible).")
    flags.DEFINE_integer("drift_at", -1, "Sample index where the hidden model changes (-1: never).")
    flags.DEFINE_integer("seed", 7, "Seed of the hidden model.")
    flags.DEFINE_integer("lines_per_message", 1, "CSV lines per Kafka message.")
    flags.DEFINE_integer("partitions", 0, "Spread over this many partitions round-robin (0: producer's choice).")
    flags.DEFINE_string("output_csv", "", "Write the samples to this CSV file instead of Kafka.")
    flags.DEFINE_bool("conversions", False, "A second label after the click, buy (a conversion after a click), "
                      "for two-task models: samples/online_multitask.config.")


def main(argv) -> None:
    del argv
    FLAGS = flags.FLAGS
    stream = SyntheticCtrStream(seed=FLAGS.seed, drift_at=None if FLAGS.drift_at < 0 else FLAGS.drift_at,
                                conversions=FLAGS.conversions)
    chunks = stream.chunks(FLAGS.start, FLAGS.samples)
    if FLAGS.output_csv:
        with open(FLAGS.output_csv, "wb") as f:
            for chunk in chunks:
                f.write(b"\n".join(chunk) + b"\n")
        print(f"wrote {FLAGS.samples} samples to {FLAGS.output_csv}")
        return
    sent = produce(FLAGS.bootstrap, FLAGS.topic, chunks, FLAGS.rate or None, FLAGS.lines_per_message,
                   FLAGS.partitions or None, progress_secs=5)
    print(f"sent {FLAGS.samples} samples in {sent} messages to {FLAGS.topic}")


def run() -> None:
    run_command(define_flags, main)


if __name__ == "__main__":
    run()
