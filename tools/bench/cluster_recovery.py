"""Benchmark: a cluster whose ps have no disk loses a ps; how long until it trains again, and what it cost.

2 ps x 1 trainer (DeepFM of samples/online.config) train a pre-filled
2-partition topic offline, checkpointing every ``--checkpoint_steps`` steps.
Each ps runs with an empty read-only tmpfs over the work directory
(``LocalCluster(ps_hidden_dir=...)``, as a Kubernetes ps pod without a
volume), so every checkpoint's bytes travel to the chief, which writes them
(``experimental_io_device``; say ``--shared_disk`` to give the ps the disk,
where that is not possible). After the second checkpoint ps1 is SIGKILLed:
the chief stops with exit code 5. Then ps1 and the chief are restarted: the
chief restores the last checkpoint into both ps and trains the rest.

Reported (seconds of wall time, this machine): each checkpoint save (the
chief's log), the checkpoint's size and table keys, the time from the kill to
the chief's exit, from the restart to the restored model (and the restore
alone, from the log) and to the end of the stream. It asserts that the
restarted cluster trained exactly what came after the checkpoint's
positions, and prints JSON, then a table.

    .venv/bin/python tools/bench/cluster_recovery.py [--samples 200000] [--checkpoint_steps 20]
"""
import argparse
import glob
import json
import os
import re
import signal
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, ROOT)


def _wait_for(cluster, pattern: str, timeout: float = 600.0) -> re.Match:
    """The first match of ``pattern`` in the chief's output (raises if the chief ends or the time is up)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        match = re.search(pattern, cluster.chief_output())
        if match:
            return match
        if cluster.processes["chief"].poll() is not None:
            break
        time.sleep(0.1)
    raise SystemExit(f"the chief never logged {pattern!r}:\n{cluster.chief_output()[-3000:]}")


def _checkpoint_facts(prefix: str) -> dict:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from easyonline.checkpoint.positions import decode_positions  # pylint: disable=g-import-not-at-top
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    keys = sum(shape[0] for name, shape in shapes.items()
               if name.startswith("model/tables/embeddings/") and name.endswith("table-keys"))
    positions = decode_positions(reader.get_tensor("positions/.ATTRIBUTES/VARIABLE_VALUE"))
    return {"bytes": sum(os.path.getsize(f) for f in glob.glob(prefix + ".*")), "table_keys": int(keys),
            "positions": positions}


def run(samples: int, checkpoint_steps: int, shared_disk: bool) -> dict:
    import easyonline  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    from easyonline.config import load_pipeline_config  # pylint: disable=g-import-not-at-top
    from easyonline.config.loader import to_text  # pylint: disable=g-import-not-at-top
    from easyonline.tools.local_broker import LocalBroker  # pylint: disable=g-import-not-at-top
    from easyonline.tools.local_cluster import LocalCluster, can_hide_dirs  # pylint: disable=g-import-not-at-top
    from easyonline.tools.stream_producer import SyntheticCtrStream, produce  # pylint: disable=g-import-not-at-top
    work = tempfile.mkdtemp(prefix="easyonline-bench-recovery-")
    shared = os.path.join(work, "shared")  # the trainers' disk
    os.makedirs(shared)
    if not shared_disk and not can_hide_dirs(shared):
        raise SystemExit("cannot hide the disk from the ps here (unshare --mount needs root or CAP_SYS_ADMIN); "
                         "run with --shared_disk")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with LocalBroker() as broker:
        broker.create_topic("bench", 2)
        produce(broker.bootstrap, "bench", SyntheticCtrStream().chunks(0, samples), partitions=2)
        config = load_pipeline_config(os.path.join(ROOT, "samples", "online.config"))
        config.model_dir = os.path.join(shared, "m")
        config.kafka_train_input.server = broker.bootstrap
        config.kafka_train_input.topic = "bench"
        config.train_config.ClearField("incr_save_config")
        config.train_config.save_checkpoints_steps = checkpoint_steps
        config.train_config.save_checkpoints_secs = 0
        path = os.path.join(work, "cluster.config")
        with open(path, "w") as f:
            f.write(to_text(config))
        with LocalCluster(2, 1, [f"--config={path}"], env=env, ps_hidden_dir=None if shared_disk else shared) \
                as cluster:
            _wait_for(cluster, r"saved checkpoint")
            while len(re.findall(r"saved checkpoint", cluster.chief_output())) < 2:
                _wait_for(cluster, r"saved checkpoint")
                time.sleep(0.1)
            killed = time.time()
            cluster.kill("ps1", signal.SIGKILL)
            code = cluster.wait(300)
            detected = time.time() - killed
            if code != 5:
                raise SystemExit(f"the chief exited {code}, not 5:\n{cluster.chief_output()[-3000:]}")
            first_run = cluster.chief_output()
            saves = [float(s) for s in re.findall(r"saved checkpoint .* in ([\d.]+)s", first_run)]
            last = re.findall(r"saved checkpoint (\S+) ", first_run)[-1]
            facts = _checkpoint_facts(last)
            restarted = time.time()
            cluster.start_task("ps", 1)
            cluster.start_task("chief", 0)
            restored = _wait_for(cluster, r"restored .* into the ps \(step \d+, positions .*\) in ([\d.]+)s")
            to_restored = time.time() - restarted
            if cluster.wait(1800) != 0:
                raise SystemExit(f"the restarted chief failed:\n{cluster.chief_output()[-3000:]}")
            to_end = time.time() - restarted
        summary = cluster.chief_output().split("training summary", 1)[1]
        trained = int(re.search(r"samples\s+(\d+)", summary).group(1))
    done = sum(facts["positions"].values())
    assert trained == samples - done, (trained, samples, done)  # exactly the rest: nothing lost, nothing twice
    return {"samples": samples, "ps_disk": "shared" if shared_disk else "none (tmpfs over model_dir's parent)",
            "checkpoint_save_seconds": saves, "checkpoint_bytes": facts["bytes"], "table_keys": facts["table_keys"],
            "kill_to_chief_exit_seconds": round(detected, 1), "restart_to_restored_seconds": round(to_restored, 1),
            "restore_seconds": float(restored.group(1)), "restart_to_end_seconds": round(to_end, 1),
            "samples_after_checkpoint": samples - done, "trained_after_restart": trained}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=200000, help="samples in the topic")
    parser.add_argument("--checkpoint_steps", type=int, default=20, help="steps between checkpoints")
    parser.add_argument("--shared_disk", action="store_true",
                        help="let the ps see the disk (where a mount namespace is not possible)")
    args = parser.parse_args()
    result = run(args.samples, args.checkpoint_steps, args.shared_disk)
    print(json.dumps(result, indent=1))
    print(f"\nps disk: {result['ps_disk']}")
    rows = [("checkpoint saves (s)", ", ".join(f"{s:.2f}" for s in result["checkpoint_save_seconds"])),
            ("checkpoint size (MB)", f"{result['checkpoint_bytes'] / 1e6:.1f}"),
            ("table keys", f"{result['table_keys']:,}"),
            ("SIGKILL ps1 -> chief exits 5 (s)", result["kill_to_chief_exit_seconds"]),
            ("restart -> restored into the ps (s)", result["restart_to_restored_seconds"]),
            ("restore alone (s)", result["restore_seconds"]),
            ("restart -> end of stream (s)", result["restart_to_end_seconds"]),
            ("samples after the checkpoint = trained", f"{result['samples_after_checkpoint']} = "
                                                        f"{result['trained_after_restart']}")]
    for name, value in rows:
        print(f"{name:<42}{value}")


if __name__ == "__main__":
    main()
