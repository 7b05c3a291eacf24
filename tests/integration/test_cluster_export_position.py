"""A server started from an export of a cluster's mid-run checkpoint ends equal to the trainer (issue 51, finding 2).

Real: a ps, the chief and a worker (LocalCluster, TF_CONFIG), training files and publishing to an
incr_save_dir, checkpoints every few steps while both trainers step; the export's own start position
(``exporter.update_stream_info``, what incr_update.txt records: the first message a server of the
export applies). Stand-in for the server: a parameter copy holding the checkpoint's rows and dense
parameters (what an export of it serves) that applies the stream from that position, by the rules
serving follows (``ParameterReplica``). Computing the position after the run instead of during it
changes nothing: it depends only on the messages' headers and the checkpoint's step.

The ids are nearly unique (a vocabulary of 100,000 per feature for 16,000 samples), so a row trained
once and missed by the server stays missing to the end. The worker kept training while the chief
saved; the chief published the rows it trained then with the chief's own last step, at or below the
checkpoint's, and the export skipped them. Now the worker also holds still while the chief saves
(save_pause.py): every checkpoint holds exactly the rows its save began with.
"""
import re

import numpy as np
import tensorflow as tf

from easyonline.checkpoint.checkpointer import checkpoint_step
from easyonline.embedding.dynamic_tables import checkpoint_tables
from easyonline.export.exporter import update_stream_info
from easyonline.scoring.checkpoint_model import CheckpointModel
from easyonline.tools.local_cluster import LocalCluster
from easyonline.tools.stream_producer import SyntheticCtrStream
from easyonline.updates.apply_rules import StreamCursor
from easyonline.updates.codec import decode_update
from easyonline.updates.model_diff import differences_from_model
from easyonline.updates.param_ids import ParameterIds, dense_variables, read_parameter_ids
from easyonline.updates.readers import DirectoryUpdateReader
from easyonline.updates.replica import ParameterReplica
from tests.conftest import online_config, python_env
from tests.integration.test_cluster import FAST, _config_file, _summary

MODEL = "m"
# the worker reads seven times the chief's samples: it is still training while the chief, which also publishes
# after each of its steps, saves its checkpoints
SAMPLES = ((0, 2000), (2000, 14000))


def _server_of_export(config, checkpoint: str, ids: ParameterIds, records) -> ParameterReplica:
    """What a server started from an export of ``checkpoint`` holds once it applied the stream to its end."""
    info = update_stream_info(config, checkpoint_step(checkpoint))
    model = CheckpointModel(config)
    model.restore(checkpoint)
    replica = ParameterReplica(MODEL)
    for name, layer in model.model.tables.embeddings.items():
        keys, values = (t.numpy() for t in layer.params.export())
        replica.tables[ids.tables[name][0]] = dict(zip(keys.tolist(), values))
    for name, variable in dense_variables(model.model).items():
        replica.dense[ids.dense[name]] = np.array(variable.numpy())  # (a scalar's too)
    replica.cursor = StreamCursor(MODEL, info["sequence"], info.get("stream_id"))
    for sequence, data in records:
        if sequence >= info["sequence"]:
            replica.apply(decode_update(data))
    return replica


def test_servers_of_exports_of_checkpoints_saved_while_a_worker_trains_end_equal_to_the_trainer(tmp_path):
    stream = SyntheticCtrStream(base_vocab=100_000, vocab_skew=1.0)
    paths = []
    for i, (start, count) in enumerate(SAMPLES):  # file 0 the chief's, file 1 the worker's
        data = tmp_path / f"train{i}.csv"
        data.write_bytes(b"\n".join(stream.lines(start, count)) + b"\n")
        paths.append(str(data))
    config = online_config(tmp_path / MODEL, **{
        **FAST, "data_config.batch_size": 20, "train_config.save_checkpoints_steps": 50,
        "train_config.keep_checkpoint_max": 100,
        "train_config.incr_save_config": {"sparse_save_steps": 1, "dense_save_steps": 1,
                                          "fs": {"incr_save_dir": str(tmp_path / "updates")}}})
    config.ClearField("kafka_train_input")
    config.file_train_input.paths.extend(paths)
    with LocalCluster(1, 2, [f"--config={_config_file(tmp_path, config)}"], env=python_env()) as cluster:
        assert cluster.wait(300) == 0, cluster.chief_output()[-4000:]
    summary = _summary(cluster.chief_output())
    assert summary["samples"] == str(sum(count for _, count in SAMPLES))
    final = CheckpointModel(config)
    final.restore(summary["checkpoint"])
    ids = read_parameter_ids(str(tmp_path / MODEL))
    records = DirectoryUpdateReader(str(tmp_path / "updates")).read_available(100_000)
    assert [s for s, _ in records] == list(range(1, len(records) + 1))
    checkpoints = tf.train.get_checkpoint_state(str(tmp_path / MODEL)).all_model_checkpoint_paths
    mid_run = [path for path in checkpoints if not summary["checkpoint"].endswith(path.rsplit("/", 1)[-1])]
    assert len(mid_run) >= 5, checkpoints
    # The worker held still while the chief saved (save_pause.py): each checkpoint holds exactly the rows
    # the tables had when its save began, none moved out of the export by the worker's inserts
    saved = re.findall(r"saved checkpoint (\S+) \(positions .*?, (\d+) rows; the other trainers held still",
                       cluster.chief_output())
    assert len(saved) >= len(mid_run), cluster.chief_output()[-4000:]
    assert {path: sum(checkpoint_tables(path).rows.values()) for path, _ in saved} == \
        {path: int(rows) for path, rows in saved}
    differing = {}
    for path in mid_run:
        found = differences_from_model(_server_of_export(config, path, ids, records), final.model, ids)
        if found:
            differing[checkpoint_step(path)] = found
    assert differing == {}
    replica = _server_of_export(config, mid_run[-1], ids, records)
    table = next(t for t in replica.tables.values() if t)
    table.pop(next(iter(table)))  # the comparison itself can fail
    assert differences_from_model(replica, final.model, ids)
