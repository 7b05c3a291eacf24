"""Parameter-server training on loopback: real ps, chief and worker processes (TF_CONFIG), a real broker.

Each cluster is started by easyonline.tools.local_cluster.LocalCluster, as
``python -m easyonline.tools.local_cluster`` does: ``LocalCluster(ps, trainers)``
runs the chief and trainers - 1 workers, each training its own partitions.
"""
import json
import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import easyonline
from easyonline.checkpoint.positions import decode_positions
from easyonline.config.loader import to_text
from easyonline.distributed.cluster_config import parse_tf_config
from easyonline.config import ConfigError
from easyonline.tools.local_cluster import LocalCluster
from easyonline.tools.stream_producer import SyntheticCtrStream, produce
from easyonline.updates.codec import decode_update
from easyonline.updates.model_diff import differences_from_model
from easyonline.updates.param_ids import read_parameter_ids
from easyonline.updates.readers import DirectoryUpdateReader
from easyonline.updates.replica import ParameterReplica
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
    others = "".join(f"\n--- {name}:\n" + cluster.output_of(name)[-3000:] for name in cluster.trainers()[1:])
    raise AssertionError(f"chief never logged {pattern!r}:\n" + cluster.chief_output()[-4000:] + others)


def _checkpoint_positions(checkpoint):
    saved = tf.train.load_checkpoint(checkpoint).get_tensor("positions/.ATTRIBUTES/VARIABLE_VALUE")
    return {str(partition): offset for partition, offset in decode_positions(saved).items()}


def _trained_partitions(output):
    """The partitions a trainer's reader was given, from its log."""
    match = re.search(r"trains partitions \[([\d, ]*)\]", output)
    assert match, output[-3000:]
    return [int(p) for p in match.group(1).split(",") if p.strip()]


def test_tf_config_errors_name_the_field():
    assert parse_tf_config("") is None
    good = {"cluster": {"chief": ["h:1"], "ps": ["h:2", "h:3"], "worker": ["h:4"]}, "task": {"type": "ps", "index": 1}}
    parsed = parse_tf_config(json.dumps(good))
    assert (parsed.task_type, parsed.task_index, parsed.num_ps, parsed.address) == ("ps", 1, 2, "h:3")
    worker = parse_tf_config(json.dumps(dict(good, task={"type": "worker", "index": 0})))
    assert (worker.num_trainers, worker.trainer_index, worker.device) == (2, 1, "/job:worker/task:0")
    alone = parse_tf_config(json.dumps({"cluster": {"chief": ["h:1"], "ps": ["h:2"]}, "task": {"type": "chief"}}))
    assert (alone.num_trainers, alone.trainer_index) == (1, 0)  # a chief and a ps: one trainer
    for broken, field in [("{", "TF_CONFIG"), (dict(good, task={"type": "boss"}), "TF_CONFIG.task.type"),
                          (dict(good, task={"type": "worker", "index": 3}), "TF_CONFIG.task.index"),
                          ({"cluster": {"chief": ["h:1"], "worker": ["h:4"]}, "task": {"type": "chief"}},
                           "TF_CONFIG.cluster.ps"),
                          ({"cluster": dict(good["cluster"], ps=["nohost"]), "task": {"type": "chief"}},
                           "TF_CONFIG.cluster.ps")]:
        with pytest.raises(ConfigError, match=re.escape(field)):
            parse_tf_config(broken if isinstance(broken, str) else json.dumps(broken))


def _evicting_publishing_config(model_dir, broker, topic, updates_dir):
    """online.config on 4 partitions, admission on C1 and eviction on C3 (on the ps), publishing to files."""
    config = online_config(model_dir, broker.bootstrap, topic, **FAST, **{"train_config.incr_save_config": {
        "sparse_save_steps": 2, "dense_save_steps": 4, "fs": {"incr_save_dir": str(updates_dir)}}})
    c1 = next(f for f in config.feature_configs if list(f.input_names) == ["C1"])
    c1.admission.count_filter.min_count = 2  # statistics and admission, on the ps
    c3 = next(f for f in config.feature_configs if list(f.input_names) == ["C3"])
    c3.eviction.max_size = 50  # the chief trims and shrinks the ps's tables; deletes are published
    config.train_config.shrink_every_secs = 1
    return config


def test_two_ps_two_trainers_train_every_sample_once_evict_publish_and_continue_in_one_process(broker, topic, tmp_path):
    """Each trainer reads its own partitions (p % 2), they step at the same time, the chief's summary covers both;
    the chief evicts from the ps's tables and publishes what both trained and what it evicted (the replayed updates
    equal the final checkpoint, bit for bit); a single process continues the checkpoint from its positions.
    (One cluster run for all of it: a cluster start is ~70 s of CPU on CI's 2 cores.)"""
    broker.create_topic(topic, 4)
    produce(broker.bootstrap, topic, SyntheticCtrStream().chunks(0, 40000), partitions=4)
    single = easyonline.online_train(
        _evicting_publishing_config(tmp_path / "single", broker, topic, tmp_path / "single_updates"), online=False)
    config = _evicting_publishing_config(tmp_path / "cluster", broker, topic, tmp_path / "updates")
    with LocalCluster(2, 2, [f"--config={_config_file(tmp_path, config)}", "--record_step_spans"],
                      env=python_env()) as cluster:
        assert cluster.wait(300) == 0, cluster.chief_output()[-4000:]
        worker = cluster.output_of("worker0")
    output = cluster.chief_output()
    assert _trained_partitions(output) == [0, 2] and _trained_partitions(worker) == [1, 3]
    summary = _summary(output)
    # every sample once: the cluster's count is exact and every partition ends at its end
    assert summary["samples"] == "40000"
    assert summary["positions"] == "{0: 10000, 1: 10000, 2: 10000, 3: 10000}"
    assert "training summary" in worker and "every trainer has caught up" in output
    cluster_auc = float(summary["window AUC"])
    # two trainers update the same parameters asynchronously: close to one process, not identical
    assert cluster_auc > 0.7 and abs(cluster_auc - single.auc) < 0.03, (cluster_auc, single.auc)
    spans = [np.load(tmp_path / "cluster" / d / "step_spans.npy") for d in ("train", "train_worker0")]
    assert all(len(s) >= 10 for s in spans)
    overlapping = sum(1 for a, b in spans[0] for c, d in spans[1] if a < d and c < b)
    assert overlapping > 0  # the two trainers were inside a step at the same time
    # (evicted by the trims to max_size after the chief's steps, or by a shrink)
    assert re.search(r"(shrink|trim to max_size) evicted \{'C3': [1-9]", output), output[-3000:]
    # the cluster's checkpoint loads into one process, with every table's keys
    from easyonline.scoring.checkpoint_model import CheckpointModel
    model = CheckpointModel(config)
    model.restore(summary["checkpoint"])
    sizes = model.model.tables.sizes()
    assert sum(sizes.values()) == int(summary["table keys"]) > 0
    assert 0 < sizes["C1"] < sizes["C2"]  # admission held back C1's one-off ids
    # the trainers share each table's Adam slots: one m and one v per table, holding every trained key
    shapes = tf.train.load_checkpoint(summary["checkpoint"]).get_variable_to_shape_map()
    keys = lambda prefix: sum(shape[0] for name, shape in shapes.items()
                              if name.startswith(prefix) and name.endswith("table-keys"))
    slots = {name.split("/")[1] for name in shapes if name.startswith("optimizer/emb_")}
    assert slots == {f"emb_{t}-parameter.S{s}" for t in sizes for s in "mv"}, sorted(slots)
    for table in sizes:
        assert keys(f"optimizer/emb_{table}-parameter.Sm/") == keys(f"model/tables/embeddings/{table}/") > 0
    # every key either trainer trained, with its final row, and every dense parameter
    records = DirectoryUpdateReader(str(tmp_path / "updates")).read_available()
    assert len(records) >= 3 and [s for s, _ in records] == list(range(1, len(records) + 1))
    replica = ParameterReplica("cluster")  # (the model's name: its model_dir's)
    for _, data in records:
        replica.apply(decode_update(data))
    assert differences_from_model(replica, model.model, read_parameter_ids(str(tmp_path / "cluster"))) == []
    # a single process goes on from the cluster's checkpoint: its positions, so only what came since
    produce(broker.bootstrap, topic, SyntheticCtrStream().chunks(40000, 4000), partitions=4)
    continued = easyonline.online_train(config, online=False)
    assert continued.steps > int(summary["steps"]), continued
    assert continued.positions == {p: 11000 for p in range(4)}, continued


def _children(pid: int) -> list:
    """Pids whose parent is ``pid`` (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                if entry.isdigit() and int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
        except (OSError, ValueError):
            pass
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except OSError:
        return False


# ~1.5 minutes; CI skips it (conftest.py): test_multi_task_production.py SIGKILLs a trainer in CI
@pytest.mark.scenario
def test_killed_worker_restarts_and_loses_nothing(broker, topic, tmp_path):
    broker.create_topic(topic, 2)
    config = online_config(tmp_path / "m", broker.bootstrap, topic, **FAST,
                           **{"train_config.save_checkpoints_steps": 10})
    producer = threading.Thread(target=produce, args=(broker.bootstrap, topic, SyntheticCtrStream().chunks(0, 24000)),
                                kwargs={"rate": 3000, "partitions": 2})
    with LocalCluster(1, 2, [f"--config={_config_file(tmp_path, config)}", "--online"], env=python_env()) as cluster:
        _wait_for(cluster, r"step=\d+ samples=")
        producer.start()
        _wait_for(cluster, r"step=(?:[3-9]|\d\d+) samples=")
        readers = _children(cluster.processes["worker0"].pid)
        assert readers  # its Kafka reader process
        cluster.kill("worker0")  # SIGKILL, mid-stream, while the chief goes on
        deadline = time.time() + 10  # the reader, and the spawn start method's resource tracker, die with it
        while [pid for pid in readers if _alive(pid)] and time.time() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in readers if _alive(pid)]
        cluster.start_task("worker", 0)  # it resumes its partition from the shared positions
        _wait_for(cluster, r"samples=(?:2[4-9]|[3-9]\d)\d\d\d ", timeout=240)  # at least every sample
        producer.join()
        cluster.stop()
        assert cluster.processes["chief"].returncode == 0, cluster.chief_output()[-4000:]
    output = cluster.chief_output()
    summary = _summary(output)
    assert summary["positions"] == "{0: 12000, 1: 12000}"
    state = tf.train.get_checkpoint_state(str(tmp_path / "m"))
    assert _checkpoint_positions(state.model_checkpoint_path) == {"0": 12000, "1": 12000}
    # repeats only for the batch in flight when it was killed
    assert 24000 <= int(summary["samples"]) <= 24000 + 2 * 500, summary


# ~2 minutes; CI skips it (conftest.py): test_cluster_no_shared_disk.py SIGKILLs a ps and restores in CI
@pytest.mark.scenario
def test_killed_ps_stops_the_cluster_and_a_restart_with_another_trainer_count_resumes(broker, topic, tmp_path):
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
    positions = _checkpoint_positions(last)
    done = sum(positions.values())
    assert 0 < done < 20000
    step = int(last.rsplit("-", 1)[1])

    # restart with another number of trainers (2 instead of 1), offline (to the end of the topic), from the
    # command line as docs/distributed.md shows it, with a config override that every trainer gets
    edits = json.dumps({"train_config.save_checkpoints_steps": 10000})
    proc = subprocess.run([sys.executable, "-m", "easyonline.tools.local_cluster", "--ps", "2", "--workers", "2",
                           "--", f"--config={config_path}", f"--edit_config_json={edits}"],
                          env=python_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    by_role = lambda role: "\n".join(line[len(role) + 3:] for line in proc.stdout.splitlines()
                                     if line.startswith(f"[{role}] "))
    output = by_role("chief")
    restored = {int(k): v for k, v in positions.items()}
    assert f"(step {step}, positions {restored})" in output  # restored exactly
    summary = _summary(output)
    assert summary["positions"] == "{0: 10000, 1: 10000}"
    # every partition resumed where the checkpoint was: the cluster trained exactly the rest
    assert int(summary["samples"]) == 20000 - done
    assert _trained_partitions(output) == [0] and _trained_partitions(by_role("worker0")) == [1]
    # the override reached the chief: the config's 5 steps would have saved a checkpoint every 5 steps
    assert len(re.findall(r"saved checkpoint", output)) == 1, re.findall(r"saved checkpoint.*", output)
    assert "[local_cluster] chief exited with 0; cluster stopped" in proc.stdout
