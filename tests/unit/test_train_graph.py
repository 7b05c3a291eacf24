"""The cluster training graph (distributed/train_graph.py) is built without a cluster: what a step sends.

Only the graph is built (no servers run); TensorFlow's placer would put the
ops where their devices say, so counting tensors whose producer and consumer
are on different tasks counts what a step transfers.
"""
import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.distributed.cluster_config import ClusterConfig
from easyonline.distributed.train_graph import TrainGraph
from easyonline.features import build_feature_specs
from easyonline.tasks import RankingTask
from tests.conftest import online_config


def _graph(tmp_path, **edits) -> TrainGraph:
    config = online_config(tmp_path, **edits)
    cluster = ClusterConfig({"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2", "127.0.0.1:3"],
                             "worker": ["127.0.0.1:4"]}, "chief", 0)
    return TrainGraph(config, build_feature_specs(config), cluster, RankingTask(1000))


def test_a_step_sends_a_few_tensors_per_ps_not_some_per_table(tmp_path):
    graph = _graph(tmp_path)
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
