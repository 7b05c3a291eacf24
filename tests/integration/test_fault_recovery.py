"""SIGKILL at random moments while a numbered stream flows: nothing lost, nothing trained twice but what
followed the last checkpoint before each kill, and the model as good as an uninterrupted one."""
import os
import random
import signal
import subprocess
import threading
import time

import numpy as np

from easyonline.config import to_text
from easyonline.core.metrics import PrequentialMetrics
from easyonline.tools.stream_producer import SyntheticCtrStream, produce
from tests.conftest import PYTHON, online_config, python_env

SAMPLES = 20000
RATE = 500  # samples/s (the stream takes 40 s)
TAIL = 4000  # samples produced only after the last kill: the stream outlasts the kills however slow the restarts
KILLS = 3


def numbered_lines(start, count):
    """The synthetic stream with each sample's number in C26."""
    return [line.rsplit(b",", 1)[0] + b",n%d" % (start + i)
            for i, line in enumerate(SyntheticCtrStream().lines(start, count))]


def read_records(path):
    """[(kind, step, rest)] in order."""
    out = []
    with open(path) as f:
        for line in f:
            if not line.endswith("\n"):
                break  # a torn last line (the kill came mid-write): it was not recorded
            kind, step, *rest = line.rstrip("\n").split(" ")
            out.append((kind, int(step), rest))
    return out


def start_trainer(config_path, record_path, log):
    return subprocess.Popen([PYTHON, "-m", "tests.fault_trainer", str(config_path), str(record_path)],
                            env=python_env(), stdout=log, stderr=subprocess.STDOUT)


def _state_and_parent(pid):
    """(state letter, parent pid) of a process, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state, parent = f.read().rsplit(")", 1)[1].split()[:2]
    except (OSError, ValueError):
        return None
    return state, int(parent)


def alive(pid):
    """Running (not gone, not a zombie waiting for its parent)."""
    info = _state_and_parent(pid)
    return info is not None and info[0] != "Z"


def descendants(pid):
    """The pids of every live process below ``pid`` (from /proc)."""
    parents = {}
    for entry in os.listdir("/proc"):
        info = _state_and_parent(entry) if entry.isdigit() else None
        if info is not None and info[0] != "Z":
            parents[int(entry)] = info[1]
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def trained_count(record_path):
    return sum(len(rest) for kind, _, rest in read_records(record_path) if kind == "T") \
        if os.path.exists(record_path) else 0


def write_config(tmp_path, name, broker, topic):
    config = online_config(tmp_path / name, broker.bootstrap, topic, **{
        "kafka_train_input.group": f"fault_test_{name}",
        "data_config.batch_size": 200, "data_config.batch_timeout_ms": 2000,
        "train_config.save_checkpoints_steps": 8, "train_config.save_checkpoints_secs": 0,
        "train_config.log_step_count_secs": 5})
    path = tmp_path / f"{name}.config"
    path.write_text(to_text(config))
    return path


def last_auc(records, first):
    """Prequential AUC of samples >= first, each scored by its last (surviving) training."""
    scored = {}
    for kind, _, rest in records:
        if kind == "T":
            for item in rest:
                n, p, label = item.split(":")
                scored[int(n)] = (float(p), int(label))
    keys = sorted(k for k in scored if k >= first)
    metrics = PrequentialMetrics(len(keys) + 1)
    metrics.update(np.array([scored[k][1] for k in keys], np.float32), np.array([scored[k][0] for k in keys]))
    return metrics.auc()


def test_sigkill_at_random_moments_loses_nothing_and_repeats_only_the_unsaved(broker, topic, tmp_path):
    broker.create_topic(topic, 2)
    producer = threading.Thread(target=produce, args=(broker.bootstrap, topic, [numbered_lines(0, SAMPLES - TAIL)]),
                                kwargs={"rate": RATE, "partitions": 2}, daemon=True)
    producer.start()
    config_path = write_config(tmp_path, "faulted", broker, topic)
    records_path = tmp_path / "faulted.records"
    rng = random.Random(20261122)
    log = open(tmp_path / "trainer.log", "ab")
    # The same stream, read as it flows by a trainer nobody kills: the reference for the model's quality.
    clean_path = tmp_path / "clean.records"
    clean = start_trainer(write_config(tmp_path, "clean", broker, topic), clean_path, log)
    for kill in range(KILLS):
        proc = start_trainer(config_path, records_path, log)
        before = trained_count(records_path)
        deadline = time.time() + 120
        while trained_count(records_path) == before and time.time() < deadline:  # until it trains
            time.sleep(0.1)
        time.sleep(rng.uniform(0.5, 4.0))  # then at a random moment
        children = descendants(proc.pid)
        assert children, "the trainer should have its Kafka reader process"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        orphans_deadline = time.time() + 10  # no child outlives its trainer by more than 10 s
        while time.time() < orphans_deadline and any(alive(c) for c in children):
            time.sleep(0.2)
        orphans = [c for c in children if alive(c)]
        assert not orphans, f"processes {orphans} outlived their SIGKILLed trainer by 10 s"
        with open(records_path, "a") as f:
            f.write(f"K {kill} killed\n")
    producer.join(120)
    tail = threading.Thread(target=produce, args=(broker.bootstrap, topic, [numbered_lines(SAMPLES - TAIL, TAIL)]),
                            kwargs={"rate": RATE, "partitions": 2}, daemon=True)
    tail.start()
    proc = start_trainer(config_path, records_path, log)  # the last run trains to the end, then stops cleanly
    deadline = time.time() + 240
    while time.time() < deadline:
        trained = {item.split(":")[0] for kind, _, rest in read_records(records_path) if kind == "T" for item in rest}
        if len(trained) >= SAMPLES:
            break
        time.sleep(0.5)
    tail.join(60)
    time.sleep(1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(120) == 0, open(tmp_path / "trainer.log").read()[-3000:]

    records = read_records(records_path)
    assert [r[0] for r in records].count("K") == KILLS and records[-1][0] == "E"
    counts, allowed, since_checkpoint = {}, set(), set()
    for kind, _, rest in records:
        if kind in ("S", "C"):
            since_checkpoint = set()
        elif kind == "T":
            for item in rest:
                n = int(item.split(":")[0])
                counts[n] = counts.get(n, 0) + 1
                since_checkpoint.add(n)
        elif kind == "K":
            allowed |= since_checkpoint  # trained after the last checkpoint before this kill
    assert sorted(counts) == list(range(SAMPLES))  # every sample trained at least once
    repeated = {n for n, c in counts.items() if c > 1}
    assert repeated <= allowed, sorted(repeated - allowed)[:20]  # and only the unsaved ones again
    assert repeated, "no kill fell between checkpoints: the test proved nothing"
    assert max(counts.values()) <= 1 + KILLS

    # After the last kill, on the rest of the stream, the faulted model scores as well as the clean one.
    deadline = time.time() + 240
    while trained_count(clean_path) < SAMPLES and time.time() < deadline:
        time.sleep(0.5)
    clean.send_signal(signal.SIGTERM)
    assert clean.wait(120) == 0
    last_kill = max(i for i, r in enumerate(records) if r[0] == "K")
    rest = 1 + max(int(item.split(":")[0]) for kind, _, items in records[:last_kill] if kind == "T" for item in items)
    assert rest <= SAMPLES - 3000, rest  # enough stream left to compare on
    faulted_auc, clean_auc = last_auc(records, rest), last_auc(read_records(clean_path), rest)
    assert abs(faulted_auc - clean_auc) <= 0.01, (faulted_auc, clean_auc, rest)
