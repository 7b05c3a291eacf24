"""A cluster whose ps hosts share no disk with the trainers (Kubernetes ps pods without a volume).

How the difference from production is simulated: each ps process starts
under ``unshare --mount`` with a private, read-only, empty tmpfs mounted over
the directory that holds model_dir and the inference saves, and checks that
the directory is empty before it starts its server. The ps thus runs on the same
machine but sees neither model_dir nor anything under it, and can write
nothing there, as a ps pod that mounts no volume; the chief and the test
see the real directory (``LocalCluster(ps_hidden_dir=...)``; the test also
reads each ps's mount table). Everything else is real: ps, chief, broker,
TensorFlow and TFRA. (Needs root or CAP_SYS_ADMIN for the mount namespace, as CI has;
under CI=true its absence fails the test; elsewhere the test is skipped, saying so.)

Before the chief did its checkpoints' file I/O itself, the first checkpoint
failed on the ps (``NotFoundError: .../model.ckpt-N_temp ... SaveV2``) and
the chief exited 1.
"""
import logging
import os
import threading

import tensorflow as tf

from easyonline.config.loader import to_text
from easyonline.export.exporter import export_saved_model
from easyonline.publish.base_delta import load_inference_model
from easyonline.tools.local_cluster import LocalCluster, can_hide_dirs
from easyonline.tools.stream_producer import SyntheticCtrStream, produce
from easyonline.updates.model_diff import differences_from_model
from easyonline.updates.param_ids import read_parameter_ids
from tests.conftest import online_config, python_env
from tests.integration.test_cluster import FAST, _checkpoint_positions, _summary, _wait_for


def _hidden_in(pid: int, directory) -> bool:
    """Whether process ``pid`` sees a read-only tmpfs mounted at ``directory`` (its /proc mountinfo)."""
    with open(f"/proc/{pid}/mountinfo") as f:
        mounts = [line.split() for line in f]
    return any(m[4] == str(directory) and m[m.index("-") + 1] == "tmpfs" and "ro" in m[5].split(",")
               for m in mounts)


def test_ps_without_model_dir_checkpoints_restores_after_a_ps_and_the_chief_restart_and_exports(
        broker, topic, tmp_path, caplog):
    """2 ps without model_dir: the chief checkpoints, evicts and saves base/delta models; a ps is
    SIGKILLed (the chief stops with exit code 5), restarted, then the chief: it restores the last
    checkpoint into the ps and trains exactly the rest of the stream; the checkpoint exports."""
    shared = tmp_path / "shared"  # the trainers' volume; the ps do not have it
    model_dir, saves = shared / "m", shared / "saves"
    shared.mkdir()
    # a core test: it fails (never skips) where the ps cannot be given a host of their own
    assert can_hide_dirs(str(shared)), "no mount namespace here (unshare --mount needs root or CAP_SYS_ADMIN)"
    broker.create_topic(topic, 2)
    total = 16000
    config = online_config(model_dir, broker.bootstrap, topic, **FAST, **{
        "train_config.save_checkpoints_steps": 5, "train_config.shrink_every_secs": 1,
        "train_config.inference_save_config": {"delta_save_steps": 3, "delta_save_secs": 0,
                                               "base_save_at_hour": -1, "save_dir": str(saves)}})
    c3 = next(f for f in config.feature_configs if list(f.input_names) == ["C3"])
    c3.eviction.max_size = 50  # the chief trims and shrinks the ps's tables
    config_path = tmp_path / "cluster.config"  # outside the hidden directory: the ps read it
    config_path.write_text(to_text(config))
    producer = threading.Thread(target=produce, args=(broker.bootstrap, topic, SyntheticCtrStream().chunks(0, total)),
                                kwargs={"rate": 2000, "partitions": 2})
    with LocalCluster(2, 1, [f"--config={config_path}", "--online"], env=python_env(),
                      ps_hidden_dir=str(shared)) as cluster:
        _wait_for(cluster, r"step=\d+ samples=")
        assert all(_hidden_in(cluster.processes[ps].pid, shared) for ps in ("ps0", "ps1"))
        assert not _hidden_in(cluster.processes["chief"].pid, shared)
        producer.start()
        _wait_for(cluster, r"saved checkpoint .*model\.ckpt-(?:1[0-9]|[2-9][0-9])\b")
        _wait_for(cluster, r"saved .*delta-\d+")
        _wait_for(cluster, r"(shrink|trim to max_size) evicted \{'C3': [1-9]")  # (trims keep it within max_size)
        cluster.kill("ps1")  # SIGKILL: its tables are gone
        assert cluster.wait(120) == 5, cluster.chief_output()[-4000:]
        assert "lost a parameter server" in cluster.chief_output()
        producer.join()
        last = tf.train.get_checkpoint_state(str(model_dir)).model_checkpoint_path
        positions = _checkpoint_positions(last)
        done = sum(positions.values())
        assert 0 < done < total
        step = int(last.rsplit("-", 1)[1])

        cluster.start_task("ps", 1)  # an empty ps, still without model_dir
        cluster.train_args = [f"--config={config_path}"]  # offline: the chief ends at the end of the stream
        cluster.start_task("chief", 0)
        assert cluster.wait(300) == 0, cluster.chief_output()[-4000:]
        assert _hidden_in(cluster.processes["ps1"].pid, shared)  # the restarted ps had no disk either
        ps_output = cluster.output_of("ps0") + cluster.output_of("ps1")
    output = cluster.chief_output()
    restored = {int(k): v for k, v in positions.items()}
    assert f"(step {step}, positions {restored})" in output  # restored into both ps, by the chief
    summary = _summary(output)
    assert summary["positions"] == "{0: 8000, 1: 8000}"
    assert int(summary["samples"]) == total - done  # exactly the rest: nothing trained was lost
    assert "No such file" not in ps_output and "NotFound" not in ps_output, ps_output[-3000:]
    final = summary["checkpoint"]
    assert _checkpoint_positions(final) == {"0": 8000, "1": 8000}

    # the base and deltas the chief wrote after the restart hold the final checkpoint's parameters
    from easyonline.scoring.checkpoint_model import CheckpointModel
    model = CheckpointModel(config)
    model.restore(final)
    replica, chain, _ = load_inference_model(str(saves))
    assert chain[0].kind == "base" and chain[-1].step == int(summary["steps"])
    assert differences_from_model(replica, model.model, read_parameter_ids(str(model_dir))) == []

    # the restored and continued checkpoint exports (in this process: an export subprocess cost one more
    # TensorFlow import; the export command line is tested by test_multi_task_models and others)
    with caplog.at_level(logging.INFO, logger="easyonline.export"):
        version = export_saved_model(config, str(tmp_path / "export"), final)
    assert f"restored step {final.rsplit('-', 1)[1]} " in caplog.text, caplog.text[-3000:]  # the final checkpoint
    assert list((tmp_path / "export").glob("*/saved_model.pb")) and os.path.isfile(f"{version}/saved_model.pb")
