"""DIN (behaviour sequences that share their item's table, a weighted tag) trains through the broker on the
reader process's arrays (vector_csv.py, multi_value_numpy.py) exactly as on the same batches parsed by
CsvParser; batches holding a bad sequence or tag weight go to CsvParser, which rejects just those lines.

The stream is written by librdkafka's transactional producer with zstd compression, as production writes it.
The first trainer reads its config's Kafka input (the reader process, parsing into arrays) and records every
batch; a second trainer from the same config is fed the recorded lines as they were batched, without arrays.
Same rejections batch by batch, same probabilities, same final parameters and table rows.
"""
import collections
import logging
from typing import List

import numpy as np

from easyonline.core.callbacks import Callback
from easyonline.core.rejections import BAD_SEQUENCE, BAD_TAG_WEIGHT, rejection_kind
from easyonline.jobs.online_train import build_trainer

from tests.integration.test_din import _bad, din_config, din_lines
from tests.integration.test_multi_task_arrays import Replay, assert_same_parameters
from tests.integration.test_transactional_topics import write_transactions

SAMPLES = 2400


class Recorder(Callback):
    """Each batch's lines, whether it came as arrays, its rejections and probabilities."""

    def __init__(self):
        self.lines: List[List[bytes]] = []
        self.arrays: List[bool] = []
        self.rejected: List[list] = []
        self.probs: List[np.ndarray] = []

    def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
        self.lines.append([line for line in raw_batch.lines if line])
        self.arrays.append(parsed_batch.vectors is not None)
        self.rejected.append(list(parsed_batch.rejected))
        self.probs.append(np.array(probs))


def test_din_trains_on_the_arrays_as_on_csv_parser_and_bad_lines_are_rejected_alike(broker, topic, tmp_path, caplog):
    lines, injected = [], collections.Counter()
    for i, line in enumerate(din_lines(0, SAMPLES)):
        lines.append(line)
        if i % 400 == 399:  # a few batches hold a bad line: the array path declines them whole
            kind = (BAD_TAG_WEIGHT, BAD_SEQUENCE)[(i // 400) % 2]
            lines.append(_bad(din_lines(70000 + i, 1)[0], kind))
            injected[kind] += 1
    broker.create_topic(topic, 1)
    # written as production writes it: librdkafka's transactional producer, zstd-compressed batches (their
    # commit markers pass through the reader process's record decoder between the sequences' records)
    assert write_transactions(broker.bootstrap, topic, lines, 300, 1, abort_every=len(lines) + 1,
                              codec="zstd") == lines
    config = din_config(tmp_path / "arrays", server=broker.bootstrap, topic=topic)
    arrays = Recorder()
    trainer = build_trainer(config, online=False, callbacks=[arrays])  # the config's input: the reader process
    with caplog.at_level(logging.INFO, logger="easyonline.inputs.build_source"):
        summary = trainer.run()
    assert "parses in C" in caplog.text  # into arrays
    assert summary.samples == SAMPLES and summary.rejected == sum(injected.values()) == 6
    assert {k: v for k, v in trainer.bad_input.counts.items() if v} == dict(injected)
    declined = [not a for a in arrays.arrays]
    holds_bad = [bool(r) for r in arrays.rejected]
    assert declined == holds_bad and sum(holds_bad) >= 3  # exactly the batches with a bad line went as lines
    assert trainer.engine._vector_steps  # the rest trained by the step that takes the arrays whole

    csv = Recorder()
    replayed = build_trainer(din_config(tmp_path / "csv", server=broker.bootstrap, topic=topic), online=False,
                             source=Replay(arrays.lines), callbacks=[csv])
    assert replayed.run().samples == SAMPLES
    assert not any(csv.arrays) and not replayed.engine._vector_steps
    assert [[(line, rejection_kind(reason)) for line, reason in r] for r in arrays.rejected] == \
        [[(line, rejection_kind(reason)) for line, reason in r] for r in csv.rejected]
    assert arrays.rejected == csv.rejected  # the same reasons, word for word
    assert len(arrays.probs) == len(csv.probs) >= 10
    for ours, theirs in zip(arrays.probs, csv.probs):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    assert_same_parameters(trainer, replayed, more_variables_than=5)
    assert len(trainer.engine.table_rows().export("item")[0]) > 250  # the histories' ids in "item" too


def test_a_cluster_trainer_feeds_the_ragged_arrays_as_csv_parser_ragged_tensors(tmp_path):
    """The ps cluster's step (distributed/train_graph.py) feeds a sequence's and a weighted tag's values and row
    splits from a batch of arrays exactly as from CsvParser's batch."""
    from easyonline.distributed.cluster_config import ClusterConfig  # pylint: disable=g-import-not-at-top
    from easyonline.distributed.train_graph import TrainGraph  # pylint: disable=g-import-not-at-top
    from easyonline.features import CsvParser, build_feature_specs  # pylint: disable=g-import-not-at-top
    from easyonline.features.csv_parser import ParsedBatch  # pylint: disable=g-import-not-at-top
    from easyonline.features.vector_csv import VectorCsvParser  # pylint: disable=g-import-not-at-top
    config = din_config(tmp_path)
    specs = build_feature_specs(config)
    cluster = ClusterConfig({"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"], "worker": []}, "chief", 0)
    graph = TrainGraph(config, specs, cluster)
    batch = din_lines(0, 60)
    feeds = []
    for parsed in (ParsedBatch.from_vectors(VectorCsvParser(specs).parse(batch)), CsvParser(specs).parse(batch)):
        assert not parsed.rejected
        labels = parsed.labels_by_name(specs.label_names[0])
        feeds.append(graph.feed(parsed.host_features(), {name: labels[name] for name in graph.label_names}, 0.0,
                                {0: 60}, 0))
    arrays, csv = feeds
    assert arrays.keys() == csv.keys()
    names = {placeholder.name.split(":")[0] for placeholder in csv}
    assert {"in_hist_item", "in_hist_item_splits", "in_tags/weights", "in_tags/weights_splits"} <= names, names
    for placeholder, value in csv.items():
        mine = np.asarray(arrays[placeholder])
        assert mine.dtype == np.asarray(value).dtype, placeholder
        np.testing.assert_array_equal(mine, np.asarray(value), err_msg=str(placeholder))
