"""An MMoE with two labels and a sample weight trains through the broker on the reader process's arrays
(the default online input), and trains exactly as the same batches parsed by CsvParser on the trainer.

The first trainer reads its config's Kafka input (a reader process that parses each batch into arrays,
``vector_csv.py``) and records every batch's lines; a second trainer, from the same config, is fed those
lines as they were batched, without arrays, so it parses them with CsvParser and trains them through the
per-feature step. Same probabilities batch after batch, same final parameters: the array path carries both
tasks' labels by name and the weights into the step as CsvParser's batches do.
"""
import logging
from typing import List, Optional

import numpy as np

from easyonline.core.callbacks import Callback
from easyonline.inputs.raw_batch import BatchSource, RawBatch
from easyonline.jobs.online_train import build_trainer
from easyonline.tools.stream_producer import produce
import pytest

from tests.integration.test_multi_task_models import ESMM, GROUPS, MMOE, config_for, lines

SAMPLES = 3000
MODELS = {"MMOE": MMOE, "ESMM": ESMM}
WEIGHTS = (b"1", b"0", b"2.5", b"0.5", b"", b"3")  # "" takes the field's default, 2


def weighted_lines(start: int, count: int) -> List[bytes]:
    """The multi-task stream (clk,buy,I1..I3,C1..C6) with a sample weight as the last field."""
    return [line + b"," + WEIGHTS[(start + i) % len(WEIGHTS)] for i, line in enumerate(lines(start, count))]


def weighted_config(model_dir, server: str, topic: str, model: str = MMOE):
    config = config_for(model, model_dir, GROUPS, server, topic)
    config.data_config.input_fields.add(input_name="w", input_type=config.data_config.FLOAT, default_val="2")
    config.data_config.sample_weight = "w"
    return config


class Recorder(Callback):
    """Each batch's lines, whether it came as arrays, its primary task's probabilities and both labels."""

    def __init__(self):
        self.lines: List[List[bytes]] = []
        self.arrays: List[bool] = []
        self.probs: List[np.ndarray] = []
        self.labels: List[dict] = []
        self.weights: List[np.ndarray] = []

    def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
        self.lines.append([line for line in raw_batch.lines if line])
        self.arrays.append(parsed_batch.vectors is not None)
        self.probs.append(np.array(probs))
        self.labels.append({name: value.numpy() for name, value in parsed_batch.label_dict.items()})
        self.weights.append(parsed_batch.sample_weights.numpy())


class Replay(BatchSource):
    """The recorded batches again, as lines only (the trainer parses them with CsvParser)."""

    def __init__(self, batches: List[List[bytes]]):
        self._batches, self._next = batches, 0

    @property
    def exhausted(self) -> bool:
        return self._next == len(self._batches)

    def next_batch(self, timeout: float) -> Optional[RawBatch]:
        if self.exhausted:
            return None
        self._next += 1
        return RawBatch(self._batches[self._next - 1], {0: self._next}, messages=len(self._batches[self._next - 1]))


def assert_same_parameters(trainer, replayed, more_variables_than: int) -> None:
    """Both trainers hold the same dense variables (paired by position: Keras numbers the second model's layers
    on) and the same rows in every table (the same keys), to float tolerance."""
    variables, replayed_variables = trainer.model.trainable_variables, replayed.model.trainable_variables
    assert len(variables) == len(replayed_variables) > more_variables_than
    for variable, other in zip(variables, replayed_variables):
        np.testing.assert_allclose(variable.numpy(), other.numpy(), rtol=1e-5, atol=1e-6, err_msg=variable.name)
    rows, replayed_rows = trainer.engine.table_rows(), replayed.engine.table_rows()
    assert rows.names() == replayed_rows.names()
    for table in rows.names():
        keys, values = rows.export(table)
        other_keys, other_values = replayed_rows.export(table)
        order, other_order = np.argsort(keys), np.argsort(other_keys)
        np.testing.assert_array_equal(keys[order], other_keys[other_order])
        np.testing.assert_allclose(values[order], other_values[other_order], rtol=1e-5, atol=1e-6, err_msg=table)


@pytest.mark.parametrize("model", ["MMOE", "ESMM"])  # ESMM: its ctcvr task reads clk times buy
def test_two_labels_and_weights_train_on_the_arrays_as_on_csv_parser(broker, topic, tmp_path, caplog, model):
    broker.create_topic(topic, 2)
    stream = weighted_lines(0, SAMPLES)
    produce(broker.bootstrap, topic, [stream], partitions=2)
    config = weighted_config(tmp_path / "arrays", broker.bootstrap, topic, MODELS[model])
    arrays = Recorder()
    trainer = build_trainer(config, online=False, callbacks=[arrays])  # the config's input: the reader process
    with caplog.at_level(logging.INFO, logger="easyonline.inputs.build_source"):
        summary = trainer.run()
    assert "a reader process decodes Kafka records in C and parses in C" in caplog.text  # into arrays
    assert summary.samples == SAMPLES
    assert all(arrays.arrays), "a batch reached the trainer as lines: the array path declined it"
    assert trainer.engine._vector_steps  # trained by the step that takes the arrays whole

    csv = Recorder()
    replayed = build_trainer(weighted_config(tmp_path / "csv", broker.bootstrap, topic, MODELS[model]), online=False,
                             source=Replay(arrays.lines), callbacks=[csv])
    assert replayed.run().samples == SAMPLES
    assert not any(csv.arrays) and not replayed.engine._vector_steps  # CsvParser's batches, the per-feature step

    # the labels and weights each path handed over, then what each trained
    by_sample = {line: line.split(b",") for line in stream}
    for batch, labels, weights in zip(arrays.lines, arrays.labels, arrays.weights):
        fields = [by_sample[line] for line in batch]
        np.testing.assert_array_equal(labels["clk"], [float(f[0]) for f in fields])
        np.testing.assert_array_equal(labels["buy"], [float(f[1]) for f in fields])
        np.testing.assert_array_equal(weights, [float(f[-1] or b"2") for f in fields])
    for ours, theirs in zip(arrays.labels + arrays.weights, csv.labels + csv.weights):
        if isinstance(ours, dict):
            assert ours.keys() == theirs.keys() == {"clk", "buy"}
            for name in ours:
                assert ours[name].tobytes() == theirs[name].tobytes()
        else:
            assert ours.tobytes() == theirs.tobytes()
    assert any(label["buy"].any() for label in arrays.labels)  # both tasks have positives
    assert len(arrays.probs) == len(csv.probs) >= 5
    for ours, theirs in zip(arrays.probs, csv.probs):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    assert_same_parameters(trainer, replayed, more_variables_than=10)
    figures, replayed_figures = trainer.engine.task_figures(), replayed.engine.task_figures()
    assert figures.keys() == replayed_figures.keys() == ({"ctr", "cvr"} if model == "MMOE" else {"ctr", "cvr", "ctcvr"})
    clicks, buys = (np.mean([float(by_sample[line][i]) for line in stream]) for i in (0, 1))
    targets = {"ctr": clicks, "cvr": buys, "ctcvr": buys}  # ctcvr: clk x buy; buy is only ever after a click
    for task in figures:  # each task's metrics read its own label(s)
        positives = targets[task]
        np.testing.assert_allclose([figures[task]["ctr"], replayed_figures[task]["ctr"]], positives, err_msg=task)
        np.testing.assert_allclose(figures[task]["auc"], replayed_figures[task]["auc"], atol=1e-3)
    assert clicks > buys > 0


def test_a_cluster_trainer_feeds_both_labels_and_the_weights_of_a_batch_of_arrays(tmp_path):
    """The ps cluster's step (distributed/session_engine.py) feeds a batch of arrays as it feeds CsvParser's:
    each task's label by name into its placeholder, the weights into theirs."""
    from easyonline.distributed.cluster_config import ClusterConfig  # pylint: disable=g-import-not-at-top
    from easyonline.distributed.train_graph import TrainGraph  # pylint: disable=g-import-not-at-top
    from easyonline.features import CsvParser, build_feature_specs  # pylint: disable=g-import-not-at-top
    from easyonline.features.csv_parser import ParsedBatch  # pylint: disable=g-import-not-at-top
    from easyonline.features.vector_csv import VectorCsvParser  # pylint: disable=g-import-not-at-top
    config = weighted_config(tmp_path, "127.0.0.1:9", "none")
    specs = build_feature_specs(config)
    cluster = ClusterConfig({"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"], "worker": []}, "chief", 0)
    graph = TrainGraph(config, specs, cluster)
    batch = weighted_lines(0, 50)
    feeds = []
    for parsed in (ParsedBatch.from_vectors(VectorCsvParser(specs).parse(batch)), CsvParser(specs).parse(batch)):
        labels = parsed.labels_by_name(specs.label_names[0])  # as SessionEngine.train_and_count reads them
        feeds.append(graph.feed(parsed.host_features(), {name: labels[name] for name in graph.label_names}, 0.0,
                                {0: 50}, 0, parsed.sample_weights))
    arrays, csv = feeds
    assert sorted(graph.label_feeds) == ["buy", "clk"]
    for name, placeholder in graph.label_feeds.items():
        np.testing.assert_array_equal(arrays[placeholder], [float(line.split(b",")[name == "buy"]) for line in batch])
        assert arrays[placeholder].tobytes() == csv[placeholder].tobytes(), name
    np.testing.assert_array_equal(arrays[graph.sample_weight], [float(line.split(b",")[-1] or b"2") for line in batch])
    assert arrays.keys() == csv.keys()
    for placeholder, value in csv.items():
        np.testing.assert_array_equal(np.asarray(arrays[placeholder]), np.asarray(value), err_msg=str(placeholder))
