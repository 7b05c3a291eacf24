"""Parameter-server training on loopback: real ps, worker and chief processes (TF_CONFIG), a real broker.

Each cluster is started by easyonline.tools.local_cluster.LocalCluster, as
``python -m easyonline.tools.local_cluster`` does.
"""
import json
import re
import threading
import time

import pytest
import tensorflow as tf

import easyonline
from easyonline.config.loader import to_text
from easyonline.distributed.cluster_config import parse_tf_config
from easyonline.config import ConfigError
from easyonline.tools.local_cluster import LocalCluster
from easyonline.tools.stream_producer import SyntheticCtrStream, produce
from tests.conftest import online_config, python_env

FAST = {"data_config.batch_size": 500, "data_config.batch_timeout_ms": 300, "train_config.log_step_count_secs": 1,
        "train_config.stop_signal_poll_secs": 0.2, "train_config.save_checkpoints_secs": 0}


def _config_file(tmp_path, config, name="cluster.config"):
    path = tmp_path / name
    path.write_text(to_text(config))
    return str(path)


def _summary(output):
    """The chief's printed training summary as {name: text}."""
    lines = output.split("training summary", 1)[1].split("\n")
    return {m.group(1).strip(): m.group(2).strip() for line in lines
            for m in [re.match(r"\s+([a-zA-Z/ ]+?)\s{2,}(.*)$", line)] if m}


def _wait_for(cluster, pattern, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        match = re.findall(pattern, cluster.chief_output())
        if match:
            return match
        if cluster.processes["chief"].poll() is not None:
            break
        time.sleep(0.3)
    raise AssertionError(f"chief never logged {pattern!r}:\n" + cluster.chief_output()[-4000:])


def _shard_keys(checkpoint, table="C1"):
    reader = tf.train.load_checkpoint(checkpoint)
    shapes = reader.get_variable_to_shape_map()
    keys = sorted((name, shape[0]) for name, shape in shapes.items()
                  if f"tables_of_emb_{table}-parameter/" in name and name.endswith("table-keys"))
    return [count for _, count in keys]


def test_tf_config_errors_name_the_field():
    assert parse_tf_config("") is None
    good = {"cluster": {"chief": ["h:1"], "ps": ["h:2", "h:3"], "worker": ["h:4"]}, "task": {"type": "ps", "index": 1}}
    parsed = parse_tf_config(json.dumps(good))
    assert (parsed.task_type, parsed.task_index, parsed.num_ps, parsed.address) == ("ps", 1, 2, "h:3")
    for broken, field in [("{", "TF_CONFIG"), (dict(good, task={"type": "boss"}), "TF_CONFIG.task.type"),
                          (dict(good, task={"type": "worker", "index": 3}), "TF_CONFIG.task.index"),
                          ({"cluster": {"chief": ["h:1"], "worker": ["h:4"]}, "task": {"type": "chief"}},
                           "TF_CONFIG.cluster.ps"),
                          ({"cluster": dict(good["cluster"], ps=["nohost"]), "task": {"type": "chief"}},
                           "TF_CONFIG.cluster.ps")]:
        with pytest.raises(ConfigError, match=re.escape(field)):
            parse_tf_config(broken if isinstance(broken, str) else json.dumps(broken))


def test_two_ps_two_workers_match_single_process_auc_and_balance_shards(broker, topic, tmp_path):
    broker.create_topic(topic, 2)
    produce(broker.bootstrap, topic, SyntheticCtrStream().chunks(0, 60000), partitions=2)
    single = easyonline.online_train(online_config(tmp_path / "single", broker.bootstrap, topic, **FAST),
                                     online=False)
    config = online_config(tmp_path / "cluster", broker.bootstrap, topic, **FAST)
    with LocalCluster(2, 2, [f"--config={_config_file(tmp_path, config)}"], env=python_env()) as cluster:
        assert cluster.wait(300) == 0, cluster.chief_output()[-4000:]
    output = cluster.chief_output()
    summary = _summary(output)
    assert summary["samples"] == "60000" and summary["positions"] == "{0: 30000, 1: 30000}"
    cluster_auc = float(summary["window AUC"])
    assert abs(cluster_auc - single.auc) < 0.01, (cluster_auc, single.auc)
    checkpoint = summary["checkpoint"]
    for table in ("C1", "C7", "C20"):
        shards = _shard_keys(checkpoint, table)
        assert len(shards) == 2
        assert all(0.4 <= s / sum(shards) <= 0.6 for s in shards), (table, shards)
    # the cluster's checkpoint gathers into one model: same keys as its shards, scores like the single process
    from easyonline.scoring.checkpoint_model import CheckpointModel
    model = CheckpointModel(config)
    model.restore(checkpoint)
    assert model.model.tables.sizes()["C1"] == sum(_shard_keys(checkpoint, "C1"))


def test_worker_killed_mid_stream_training_continues(broker, topic, tmp_path):
    broker.create_topic(topic, 2)
    config = online_config(tmp_path / "m", broker.bootstrap, topic, **FAST,
                           **{"train_config.save_checkpoints_steps": 10})
    producer = threading.Thread(target=produce, args=(broker.bootstrap, topic, SyntheticCtrStream().chunks(0, 24000)),
                                kwargs={"rate": 3000, "partitions": 2})
    with LocalCluster(2, 2, [f"--config={_config_file(tmp_path, config)}", "--online"], env=python_env()) as cluster:
        _wait_for(cluster, r"step=\d+ samples=")
        producer.start()
        _wait_for(cluster, r"step=(?:[3-9]|\d\d+) samples=")
        cluster.kill("worker1")  # SIGKILL, mid-stream
        _wait_for(cluster, r"samples=24000 ", timeout=240)  # every sample trained regardless
        producer.join()
        cluster.stop()
        assert cluster.processes["chief"].returncode == 0, cluster.chief_output()[-4000:]
    summary = _summary(cluster.chief_output())
    assert summary["samples"] == "24000" and summary["positions"] == "{0: 12000, 1: 12000}"


def test_killed_ps_stops_the_chief_and_a_restart_loses_no_sample(broker, topic, tmp_path):
    broker.create_topic(topic, 2)
    config = online_config(tmp_path / "m", broker.bootstrap, topic, **FAST,
                           **{"train_config.save_checkpoints_steps": 5})
    config_path = _config_file(tmp_path, config)
    producer = threading.Thread(target=produce, args=(broker.bootstrap, topic, SyntheticCtrStream().chunks(0, 20000)),
                                kwargs={"rate": 2500, "partitions": 2})
    with LocalCluster(2, 1, [f"--config={config_path}", "--online"], env=python_env()) as cluster:
        _wait_for(cluster, r"step=\d+ samples=")
        producer.start()
        _wait_for(cluster, r"saved checkpoint .*model\.ckpt-(?:1[0-9]|[2-9][0-9])\b")
        cluster.kill("ps1")
        code = cluster.wait(120)
        output = cluster.chief_output()
        producer.join()
    assert code == 5, output[-4000:]
    assert "lost a parameter server" in output
    state = tf.train.get_checkpoint_state(str(tmp_path / "m"))
    last = state.model_checkpoint_path
    positions = json.loads(tf.train.load_checkpoint(last).get_tensor(
        "positions/.ATTRIBUTES/VARIABLE_VALUE").decode())
    done = sum(positions.values())
    assert 0 < done < 20000

    step = int(last.rsplit("-", 1)[1])

    # restart with another number of workers (2 instead of 1), offline: to the end of the topic, with a
    # checkpoint only at the end (a cluster checkpoint costs ~2 s; every 5 steps they were most of the test's time)
    config.train_config.save_checkpoints_steps = 10000
    with LocalCluster(2, 2, [f"--config={_config_file(tmp_path, config, 'restart.config')}"],
                      env=python_env()) as cluster:
        assert cluster.wait(300) == 0, cluster.chief_output()[-4000:]
    output = cluster.chief_output()
    assert f"(step {step}, positions {json.dumps(positions).replace(chr(34), '')})" in output  # restored exactly
    summary = _summary(output)
    assert summary["positions"] == "{0: 10000, 1: 10000}"
    assert int(summary["samples"]) == 20000 - done  # resumed exactly where the last checkpoint was


def test_cluster_publishes_exact_updates_and_its_checkpoint_needs_as_many_ps(tmp_path):
    """The chief's incremental publishing replays into the trained model; a restart with fewer ps is refused.

    Files and a directory transport instead of Kafka: this test is about the cluster, not the broker."""
    from easyonline.updates.param_ids import read_parameter_ids
    from easyonline.updates.model_diff import differences_from_model
    from easyonline.updates.replica import ParameterReplica
    from easyonline.updates.codec import decode_update
    from easyonline.scoring.checkpoint_model import CheckpointModel
    from easyonline.tools.read_updates import read_all
    from easyonline.updates.transport import DIRECTORY, StreamLocation
    data = tmp_path / "train.csv"
    data.write_bytes(b"\n".join(SyntheticCtrStream().lines(0, 6000)) + b"\n")
    config = online_config(tmp_path / "m", **FAST, **{
        "train_config.incr_save_config.sparse_save_secs": 1, "train_config.incr_save_config.dense_save_secs": 1,
        "train_config.incr_save_config.fs.incr_save_dir": str(tmp_path / "updates"),
        "train_config.shrink_every_secs": 1e-6})
    c1 = next(f for f in config.feature_configs if list(f.input_names) == ["C1"])
    c1.admission.count_filter.min_count = 2  # statistics and admission, per shard on the ps
    c1.eviction.max_size = 120  # evictions run from the chief over both shards, and are published as deletes
    config.ClearField("kafka_train_input")
    config.file_train_input.paths.append(str(data))
    config_path = _config_file(tmp_path, config)
    with LocalCluster(2, 1, [f"--config={config_path}"], env=python_env()) as cluster:
        assert cluster.wait(300) == 0, cluster.chief_output()[-4000:]
    summary = _summary(cluster.chief_output())
    assert summary["steps"] == "12" and "published the final update" in cluster.chief_output()

    records = read_all(StreamLocation(DIRECTORY, directory=str(tmp_path / "updates")))
    replica = ParameterReplica()
    for _, message in records:
        assert replica.apply(decode_update(message))
    model = CheckpointModel(config)
    model.restore(summary["checkpoint"])
    assert model.shards == 2 and sum(model.model.tables.sizes().values()) == int(summary["table keys"])
    assert "shrink evicted" in cluster.chief_output(), cluster.chief_output()[-3000:]
    assert 0 < model.model.tables.sizes()["C1"] <= 120 < model.model.tables.sizes()["C2"]
    assert len(_shard_keys(summary["checkpoint"], "C1")) == 2
    stats = [n for n in tf.train.load_checkpoint(summary["checkpoint"]).get_variable_to_shape_map()
             if "emb_C1-parameter-stats" in n and n.endswith("table-keys")]
    assert len(stats) == 2  # the statistics table is sharded too
    assert differences_from_model(replica, model.model, read_parameter_ids(config.model_dir)) == []

    with LocalCluster(1, 1, [f"--config={config_path}"], env=python_env()) as cluster:
        assert cluster.wait(300) == 2
    assert "has 2 shard(s) per table" in cluster.chief_output()
    config.train_config.ClearField("incr_save_config")
    single = easyonline.online_train(config, online=False)  # a single process gathers the shards and goes on
    assert single.steps == 24  # restored at step 12, then the file once more
