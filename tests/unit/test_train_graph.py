"""The cluster training graph (distributed/train_graph.py) is built without a cluster: what a step sends.

Only the graph is built (no servers run); TensorFlow's placer would put the
ops where their devices say, so counting tensors whose producer and consumer
are on different tasks counts what a step transfers.
"""
import numpy as np

import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.distributed.cluster_config import ClusterConfig
from easyonline.distributed.train_graph import TrainGraph, op_task
from easyonline.features import build_feature_specs
from tests.conftest import online_config

tf = ensure_legacy_keras()


def _graph(tmp_path, **edits) -> TrainGraph:
    config = online_config(tmp_path, **edits)
    cluster = ClusterConfig({"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2", "127.0.0.1:3"],
                             "worker": ["127.0.0.1:4"]}, "chief", 0)
    return TrainGraph(config, build_feature_specs(config), cluster)


def _ancestors(tensors) -> set:
    """The ops that ``tensors`` (or ops) wait for, through their inputs and control inputs."""
    found, stack = set(), [t if isinstance(t, tf.Operation) else t.op for t in tensors]
    while stack:
        op = stack.pop()
        if op not in found:
            found.add(op)
            stack.extend([t.op for t in op.inputs] + list(op.control_inputs))
    return found


def test_a_step_sends_a_few_tensors_per_ps_not_some_per_table(tmp_path):
    graph = _graph(tmp_path, full_sample=True)  # the sample's 26 tables: per-table transfers would show
    tables = len(graph.model.tables.embeddings)
    assert tables == 26
    to_ps = {task: n for task, n in graph.transfers.items() if task.startswith("/job:ps")}
    assert set(to_ps) == {"/job:ps/task:0", "/job:ps/task:1"}
    # per ps: the packed ids and their sizes, the packed gradient (values, indices), the dense
    # part's gradients; per table, it would be at least one id tensor and one gradient each
    assert sum(to_ps.values()) < tables, graph.transfers
    assert graph.transfers["/job:chief/task:0"] < tables, graph.transfers


def test_tables_split_by_key_still_build_and_train_through_every_ps(tmp_path):
    graph = _graph(tmp_path, **{"train_config.ps_shard_tables_by_key": True})
    devices = {device for layer in graph.model.tables.embeddings.values() for device in layer.params.devices}
    assert devices == {"/job:ps/task:0", "/job:ps/task:1"}
    assert graph.transfers["/job:ps/task:0"] > 0 and graph.transfers["/job:ps/task:1"] > 0


def test_the_shared_writes_take_nothing_the_trainer_computes_after_the_parameter_updates(tmp_path):
    """A trainer killed after the ps applied a batch must not leave its positions written and its count not.

    The positions, samples and metrics are written on the ps once the batch's parameter updates ran. If
    a value they write were computed on the trainer after those updates (it was: the count of the labels,
    under the same control dependencies), it would travel ps -> trainer -> ps, and a SIGKILL in that round
    trip advanced the positions without counting the samples (a CI run of test_cluster saw the cluster
    stop 457 samples short of the stream).
    """
    graph = _graph(tmp_path)
    own = "/job:chief/task:0"
    state = graph.state
    variables = [state.positions, state.samples, state.global_step, state.lags,
                 *[variable for sums in state.task_sums.values() for variable in sums.values()]]
    handles = {variable.handle.op for variable in variables}
    step = _ancestors(tf.nest.flatten(graph.train_op))
    writes = [op for op in step if op.inputs and op.inputs[0].op in handles and op.type != "ReadVariableOp"]
    assert len(writes) == len(variables), sorted(op.type for op in writes)
    updates = {op if isinstance(op, tf.Operation) else op.op for op in graph.parameter_updates}
    late = set()  # ops that wait, through data or control, for a parameter update of the step
    for op in graph.graph.get_operations():  # in creation order: every input before its consumer
        if op in updates or any(t.op in late for t in op.inputs) or any(c in late for c in op.control_inputs):
            late.add(op)
    assert all(write in late for write in writes)  # they do wait for the updates
    for write in writes:
        inputs = _ancestors(write.inputs[1:])
        on_trainer_after = [op.name for op in inputs if op in late and op_task(op, own) == own]
        assert not on_trainer_after, (write.name, on_trainer_after)


def test_a_batch_parsed_into_arrays_feeds_the_cluster_step_as_csv_parsers_features_do(tmp_path):
    """The cluster trainer feeds a reader-parsed batch's columns (ParsedBatch.host_features) straight
    into the step's placeholders; they must be what CsvParser's features would feed, placeholder for
    placeholder."""
    from easyonline.features.csv_parser import CsvParser, ParsedBatch  # pylint: disable=g-import-not-at-top
    from easyonline.features.vector_csv import VectorCsvParser  # pylint: disable=g-import-not-at-top
    from easyonline.tools.stream_producer import SyntheticCtrStream  # pylint: disable=g-import-not-at-top

    graph = _graph(tmp_path)
    specs = graph.model.specs
    lines = SyntheticCtrStream().lines(0, 300)
    from_tensors = CsvParser(specs).parse(lines)
    from_arrays = ParsedBatch.from_vectors(VectorCsvParser(specs).parse(lines))
    positions = {0: 300}
    expected = graph.feed(from_tensors.features, from_tensors.labels.numpy(), 1.0, positions, 0)
    got = graph.feed(from_arrays.host_features(), from_arrays.labels, 1.0, positions, 0)
    assert set(got) == set(expected)
    for placeholder, value in expected.items():
        assert np.asarray(got[placeholder]).tobytes() == np.asarray(value).tobytes(), placeholder.name


def test_a_sequence_model_feeds_ragged_ids_and_weights_and_shares_the_target_table_on_its_ps(tmp_path):
    """DIN's cluster graph: a history (``hist_item``) looks up in its target's table (``item``), one table on
    one ps; a ragged feature feeds its flat values and row splits, a weighted tag its weights too."""
    from easyonline.features.csv_parser import CsvParser  # pylint: disable=g-import-not-at-top
    from tests.integration.test_din import din_config, din_lines  # pylint: disable=g-import-not-at-top

    config = din_config(tmp_path)
    cluster = ClusterConfig({"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2", "127.0.0.1:3"], "worker": []},
                            "chief", 0)
    graph = TrainGraph(config, build_feature_specs(config), cluster)
    tables = graph.model.tables.embeddings
    assert sorted(tables) == ["cate", "item", "tags", "user"]  # hist_item and hist_cate: no table of their own
    assert all(table.ps_device in ("/job:ps/task:0", "/job:ps/task:1") for table in tables.values())
    feeds = {name: (values, splits) for name, values, splits in graph._feature_feeds}  # pylint: disable=protected-access
    assert all(feeds[name][1] is not None for name in ("hist_item", "hist_cate", "tags", "tags/weights"))
    batch = CsvParser(graph.model.specs).parse(din_lines(0, 50) + [b"1,u1,i3,c3,1.0,i9|i3,c9|c3,t1:0.5|t2:2"])
    feed = graph.feed(batch.features, batch.labels.numpy(), 0.0, {0: 51}, 0)
    values, splits = feeds["tags/weights"]
    np.testing.assert_allclose(feed[values][-2:], [0.5, 2.0])
    assert feed[splits][-1] == len(feed[values]) == len(feed[feeds["tags"][0]])
    values, splits = feeds["hist_item"]
    assert feed[values][-1] == batch.features["item"].numpy()[-1]  # "i3": one id, in a history as a target
    assert np.diff(feed[splits]).max() <= 5  # sequence_length: 5
    # the item table's lookup takes the targets' and the histories' ids in one vector, on the table's ps
    assert len(tables["item"].wrappers) == 1, tables["item"].wrappers
    assert tables["item"].wrappers[0].device == tables["item"].ps_device
