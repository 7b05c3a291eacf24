"""A sequence model on the parameter-server cluster: DIN (a history sharing the item table, a history of
categories with several at some positions, a weighted tag feature) trains on two ps and one trainer, and the
updates it publishes replay into its checkpoint. Its stream is written as production writes it: librdkafka's
transactional producer, zstd-compressed, every fourth transaction aborted (none of those samples may train).

The cluster feeds ragged features (ids, their row splits, a weighted tag's weights, a sequence's positions)
through placeholders; a history id is looked up in (and trained into) the target's table on its ps, as in a
single process.
"""
import numpy as np
import pytest

from easyonline.config.loader import to_text
from easyonline.features.csv_parser import CsvParser
from easyonline.features.signature import empty_features
from easyonline.models.builder import build_model
from easyonline.scoring.checkpoint_model import CheckpointModel
from easyonline.tools.local_cluster import LocalCluster
from easyonline.updates.codec import decode_update
from easyonline.updates.model_diff import differences_from_model
from easyonline.updates.param_ids import read_parameter_ids
from easyonline.updates.readers import DirectoryUpdateReader
from easyonline.updates.replica import ParameterReplica
from tests.conftest import python_env
from tests.integration.test_cluster import _summary
from tests.integration.test_backbone import BST, GROUPS as BACKBONE_GROUPS
from tests.integration.test_din import GROUPS, DIN, din_config, din_lines
from tests.integration.test_transactional_topics import write_transactions

SAMPLES = 2400  # committed: 3200 written in transactions of 200, every fourth aborted


# Under CI DIN's run is a scenario (conftest.py): the backbone BST's run crosses the ps with a history the same way.
@pytest.mark.parametrize("model,groups,layer,kernels", [
    pytest.param(DIN, GROUPS, ("attentions/din/", "seq_dnn"), 5, marks=pytest.mark.scenario),
    (BST, BACKBONE_GROUPS, ("block_layers/seq/0/layers_/0/query/", "layer_0_query"), 11)], ids=["din", "bst_backbone"])
def test_a_two_ps_cluster_trains_a_sequence_model_and_its_published_updates_equal_its_checkpoint(
        broker, topic, tmp_path, model, groups, layer, kernels):
    """Tables split by key (ps_shard_tables_by_key): the sequence's ids and the target's of one table live on
    both ps, so a history's lookup crosses ps. (Whole tables, one ps per table, are what test_cluster and the
    other cluster tests run.) DIN, and EasyRec's backbone form of BST (blocks, a sequence input, BERT's
    encoder with dropout)."""
    # the first line's history holds an id ("i9999") no sample has as a target: only a lookup of the
    # sequence in the shared table can give it a row; its first position has two categories (seq_multi_sep)
    first = b"1,u1,i3,c3,1.0,i9999|i3,c3;c7|c3,t1:0.5"
    broker.create_topic(topic, 2)
    committed = write_transactions(broker.bootstrap, topic, [first] + din_lines(0, SAMPLES * 4 // 3 - 1), 200, 2,
                                   codec="zstd", send_before_abort=False)
    assert len(committed) == SAMPLES and committed[0] == first
    config = din_config(tmp_path / "model", model, broker.bootstrap, topic, groups=groups)
    next(f for f in config.feature_configs if f.input_names[0] == "hist_cate").seq_multi_sep = ";"
    config.train_config.incr_save_config.fs.incr_save_dir = str(tmp_path / "updates")
    config.train_config.incr_save_config.sparse_save_steps = 2
    config.train_config.incr_save_config.dense_save_steps = 3
    config.train_config.ps_shard_tables_by_key = True
    path = tmp_path / "cluster.config"
    path.write_text(to_text(config))
    with LocalCluster(2, 1, [f"--config={path}"], env=python_env()) as cluster:
        assert cluster.wait(300) == 0, cluster.chief_output()[-4000:]
    output = cluster.chief_output()
    summary = _summary(output)
    assert summary["samples"] == str(SAMPLES), output[-3000:]
    model = CheckpointModel(config)
    model.restore(summary["checkpoint"])
    records = DirectoryUpdateReader(str(tmp_path / "updates")).read_available()
    replica = ParameterReplica("model")
    for _, data in records:
        replica.apply(decode_update(data))
    ids = read_parameter_ids(str(tmp_path / "model"))
    assert differences_from_model(replica, model.model, ids) == []
    assert any(name.startswith(layer[0]) for name in ids.dense), sorted(ids.dense)
    # one item table for targets and histories: the history-only id has a row, and a tag has rows
    parser = CsvParser(model.specs)
    assert parser.parse([first]).features["hist_cate/positions"].to_list() == [[0, 0, 1]]
    history_only = parser.parse([b"0,u1,i9999,c3,1.0,,,"]).features["item"].numpy()[0]
    items = set(model.model.tables.embeddings["item"].params.export()[0].numpy().tolist())
    assert history_only in items
    assert "hist_item" not in model.model.tables.embeddings
    assert model.model.tables.embeddings["tags"].params.size().numpy() > 0
    # every layer trained, the attention's (the encoder's) too: each kernel moved from a fresh model's (the same seed) initial
    # values. (Not a learning check: DIN leaves its initial plateau after 12 to 40+ steps, by seed.)
    fresh = build_model(config, model.specs)
    fresh(empty_features(model.specs))
    moved = [(trained.name, trained.numpy(), initial.numpy()) for trained, initial in
             zip(model.model.trainable_variables, fresh.trainable_variables) if "kernel" in trained.name]
    assert len(moved) == kernels and any(layer[1] in name for name, _, _ in moved), [k[0] for k in moved]
    assert [name for name, trained, initial in moved if np.array_equal(trained, initial)] == []
