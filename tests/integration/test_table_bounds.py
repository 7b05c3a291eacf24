"""Tables with an eviction ``max_size`` stay within it between shrinks (embedding/size_bound.py).

A trainer with no shrink schedule trains a stream that brings new ids all the time: its tables stay within
max_size plus the slack at every turn of the loop, its checkpoints and export hold at most max_size rows,
and a server following its update directory holds no more (the trims are published as deletes).
"""
import json

from easyonline.core.callbacks import Callback
from easyonline.embedding.eviction import STATS_PER_ROW
from easyonline.embedding.size_bound import ceiling
from easyonline.jobs.online_train import build_trainer
from easyonline.tools.stream_producer import SyntheticCtrStream
from easyonline.updates.readers import DirectoryUpdateReader
from easyonline.updates.replica import replay
from easyonline.updates.param_ids import read_parameter_ids
from tests.conftest import TEST_TABLES, online_config
from tests.integration.test_incremental_updates import assert_replica_equals_trainer

MAX_SIZE = 40


class SizeLog(Callback):
    """Every table's rows and statistics at each turn of the loop and at each checkpoint."""

    def __init__(self):
        self.ticks, self.checkpoints = [], []

    def on_tick(self, trainer):
        tables = trainer.model.tables
        self.ticks.append({name: (int(layer.params.size()), int(tables.statistics[name].size()))
                           for name, layer in tables.embeddings.items()})

    def on_checkpoint(self, trainer, path):
        self.checkpoints.append((path, {name: int(layer.params.size())
                                        for name, layer in trainer.model.tables.embeddings.items()}))


def test_tables_stay_within_max_size_between_shrinks_in_checkpoints_exports_and_servers(tmp_path):
    path = tmp_path / "s.csv"
    stream = SyntheticCtrStream(base_vocab=200, new_ids_per_10k=3000)  # 3 new ids per feature every 10 samples
    path.write_bytes(b"\n".join(stream.lines(0, 4000)) + b"\n")
    updates = tmp_path / "updates"
    config = online_config(tmp_path / "model", **{
        "data_config.batch_size": 200, "train_config.save_checkpoints_secs": 0,
        "train_config.save_checkpoints_steps": 6, "train_config.shrink_every_secs": 0,
        "train_config.incr_save_config": {"sparse_save_steps": 2, "dense_save_steps": 4,
                                          "fs": {"incr_save_dir": str(updates)}}})
    config.ClearField("kafka_train_input")
    config.file_train_input.paths.append(str(path))
    for feature in config.feature_configs:
        if feature.feature_type == feature.IdFeature:
            feature.eviction.max_size = MAX_SIZE
    sizes = SizeLog()
    trainer = build_trainer(config, online=False, callbacks=[sizes])
    summary = trainer.run()
    assert summary.samples == 4000 and len(summary.table_sizes) == TEST_TABLES

    # during the run: within the slack at every turn of the loop (the stream would grow each table to ~600)
    assert len(sizes.ticks) >= 20
    rows_seen = max(rows for tick in sizes.ticks for rows, _ in tick.values())
    stats_seen = max(stats for tick in sizes.ticks for _, stats in tick.values())
    assert rows_seen <= ceiling(MAX_SIZE), rows_seen
    assert stats_seen <= ceiling(STATS_PER_ROW * MAX_SIZE), stats_seen
    assert trainer.trims > 0 and all(len(keys) for keys in trainer.evicted.values())

    # every checkpoint (the last one at the end of the run) holds at most max_size rows per table
    assert len(sizes.checkpoints) >= 3 and sizes.checkpoints[-1][0] == summary.checkpoint
    assert all(rows <= MAX_SIZE for _, tables in sizes.checkpoints for rows in tables.values()), sizes.checkpoints
    assert all(rows <= MAX_SIZE for rows in summary.table_sizes.values())

    # the export of the last checkpoint
    from easyonline.export.exporter import export_saved_model  # pylint: disable=import-outside-toplevel
    embeddings = tmp_path / "embeddings"
    export_saved_model(config, str(tmp_path / "export"), embedding_export_dir=str(embeddings))
    exported = json.loads((embeddings / "manifest.json").read_text())
    assert exported["checkpoint"] == summary.checkpoint
    assert len(exported["tables"]) == TEST_TABLES
    assert all(0 < table["rows"] <= MAX_SIZE for table in exported["tables"].values()), exported["tables"]
    # TFRA's inference mode is process-global: the export gives it back, or a trainer built later in this
    # process (the next test of this pytest worker) finds no gradients for its tables
    from tensorflow_recommenders_addons import dynamic_embedding as de  # pylint: disable=import-outside-toplevel
    assert de.ModelMode.CURRENT_SETTING == de.ModelMode.TRAIN

    # a server that followed the update directory from its start: the trims reached it as deletes
    reader = DirectoryUpdateReader(str(updates))
    records, batch = [], reader.read_available()
    while batch:
        records.extend(batch)
        batch = reader.read_available()
    replica = replay(records, "model")
    assert replica.tables and all(len(rows) <= MAX_SIZE for rows in replica.tables.values())
    assert_replica_equals_trainer(replica, trainer, tmp_path / "model")
    assert len(read_parameter_ids(str(tmp_path / "model")).tables) == TEST_TABLES
