"""OnlineTrainer end to end on real TensorFlow/TFRA and the real local broker."""
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request

import numpy as np
import pytest
import tensorflow as tf

from easyonline.tools.stream_producer import SyntheticCtrStream, produce
from easyonline.core.callbacks import Callback
from easyonline.core.errors import ConfigError
from easyonline.core.stop_signal import STOP_SIGNAL_FILE
from easyonline.jobs.online_train import build_trainer
from easyonline.utils import preloaded_python
from tests.conftest import PYTHON, SAMPLES, online_config, python_env, sorted_rows

FAST = {"data_config.batch_size": 256, "data_config.batch_timeout_ms": 200, "train_config.log_step_count_secs": 1,
        "train_config.stop_signal_poll_secs": 0.2, "train_config.save_checkpoints_secs": 0}


def _stream_to(broker, topic, count, start=0, partitions=2):
    broker.create_topic(topic, partitions)
    produce(broker.bootstrap, topic, SyntheticCtrStream().chunks(start, count), lines_per_message=2,
            partitions=partitions)


def _write_csv(path, count, start=0):
    with open(path, "wb") as f:
        for chunk in SyntheticCtrStream().chunks(start, count):
            f.write(b"\n".join(chunk) + b"\n")


class StopAfter(Callback):
    """Creates the stop file after ``batches`` batches (as an operator would)."""

    def __init__(self, batches):
        self.batches = batches
        self.seen = 0
        self.created = self.last_batch = 0.0  # (time.monotonic())

    def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
        self.seen += 1
        self.last_batch = time.monotonic()
        if self.seen == self.batches:
            open(os.path.join(trainer.config.model_dir, STOP_SIGNAL_FILE), "w").close()
            self.created = time.monotonic()


def test_stop_file_finishes_the_batch_checkpoints_and_records_positions(broker, topic, tmp_path):
    _stream_to(broker, topic, 10000)
    config = online_config(tmp_path / "m", broker.bootstrap, topic, **FAST)
    stopper = StopAfter(10)
    summary = build_trainer(config, online=True, callbacks=[stopper]).run()
    assert "stop signal" in summary.stop_reason
    assert summary.steps >= 10
    # The file is polled every 0.2 s: training stops soon after it appears, however fast the steps are.
    assert stopper.last_batch - stopper.created < 1.5, (summary.steps, stopper.last_batch - stopper.created)
    assert summary.checkpoint and os.path.exists(summary.checkpoint + ".index")
    assert sum(summary.positions.values()) * 2 == summary.samples  # 2 lines per message
    # A new trainer resumes from the checkpoint's positions, not from the start.
    os.remove(os.path.join(config.model_dir, STOP_SIGNAL_FILE))
    again = build_trainer(config, online=False)
    assert again.checkpointer.positions == summary.positions
    resumed = again.run()
    assert resumed.samples == 10000 - summary.samples
    assert resumed.positions == {0: 2500, 1: 2500}
    assert resumed.steps > summary.steps


def test_sigterm_stops_the_cli_cleanly_with_a_checkpoint(broker, topic, tmp_path):
    _stream_to(broker, topic, 5000)
    model_dir = tmp_path / "m"
    edits = dict(FAST, **{"kafka_train_input.server": broker.bootstrap, "kafka_train_input.topic": topic,
                          "train_config.incr_save_config.kafka.server": broker.bootstrap,
                          "train_config.incr_save_config.kafka.topic": topic + "_updates"})
    import json
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        metrics_port = s.getsockname()[1]
    proc = preloaded_python.Popen([PYTHON, "-m", "easyonline.train", f"--config={os.path.join(SAMPLES, 'online.config')}",
                             "--online", f"--model_dir={model_dir}", f"--edit_config_json={json.dumps(edits)}",
                             f"--metrics_port={metrics_port}"],
                            env=python_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    output = []
    while time.time() < deadline:
        line = proc.stdout.readline()
        output.append(line)
        if "step=" in line and "samples=5000 " in line:
            break
    assert any("samples=5000 " in l for l in output), "".join(output[-20:])
    # the status line's figures on /metrics, with Prometheus' types
    deadline = time.time() + 60  # the published sequence appears once the first update is acknowledged
    while time.time() < deadline:
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        if "easyonline_trainer_samples_total 5000" in metrics and \
                re.search(r"^easyonline_trainer_published_sequence [1-9]", metrics, re.M):
            break
        time.sleep(0.1)
    assert "easyonline_trainer_samples_total 5000.0" in metrics, metrics
    assert "# TYPE easyonline_trainer_samples_total counter" in metrics and "# TYPE easyonline_trainer_auc gauge" in metrics
    auc = float(re.search(r"^easyonline_trainer_auc (\S+)$", metrics, re.M).group(1))
    assert 0.5 < auc < 1, metrics
    assert re.search(r'^easyonline_trainer_table_keys\{table="C1"\} [1-9]', metrics, re.M), metrics
    assert re.search(r"^easyonline_trainer_published_sequence [1-9]", metrics, re.M), metrics
    # a port in use is a clear error, before anything starts
    taken = preloaded_python.run([PYTHON, "-m", "easyonline.train", f"--config={os.path.join(SAMPLES, 'online.config')}",
                            "--online", f"--model_dir={tmp_path / 'other'}", f"--metrics_port={metrics_port}"],
                           env=python_env(), capture_output=True, text=True, timeout=120)
    assert taken.returncode == 2 and f"--metrics_port {metrics_port}" in taken.stderr, taken.stderr[-3000:]
    # a second trainer on the same model_dir stops with its own exit code, and writes nothing
    second = preloaded_python.run([PYTHON, "-m", "easyonline.train", f"--config={os.path.join(SAMPLES, 'online.config')}",
                             "--online", f"--model_dir={model_dir}", f"--edit_config_json={json.dumps(edits)}"],
                            env=python_env(), capture_output=True, text=True, timeout=120)
    assert second.returncode == 6, second.stderr[-3000:]
    assert "another trainer is writing to this model_dir" in second.stderr and f"pid {proc.pid}" in second.stderr
    assert (model_dir / "TRAINER_LOCK").exists()
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest[-3000:]
    assert not (model_dir / "TRAINER_LOCK").exists()  # released at a clean stop
    assert "received SIGTERM" in rest
    assert "training summary" in rest
    assert os.path.exists(model_dir / "checkpoint")
    assert "positions        {0: 1250, 1: 1250}" in rest
    assert "published the final update" in rest  # the sample config publishes; SIGTERM flushes it


# (CI skips the EasyRec spelling, conftest.py: test_easyrec_configs passes --pipeline_config_path to every train)
@pytest.mark.parametrize("config_flag", ["--config", pytest.param("--pipeline_config_path", marks=pytest.mark.scenario)])
def test_config_error_exits_2_and_names_the_field(tmp_path, config_flag):
    """Also through EasyRec's flag names (--pipeline_config_path, --continue_train)."""
    proc = preloaded_python.run([PYTHON, "-m", "easyonline.train", f"{config_flag}={os.path.join(SAMPLES, 'online.config')}",
                           "--online", "--continue_train", '--edit_config_json={"data_config.batch_size": 0}'],
                          env=python_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "data_config.batch_size" in proc.stderr


def test_offline_then_online_through_fine_tune_checkpoint(broker, topic, tmp_path):
    _write_csv(tmp_path / "train.csv", 10000)  # (it beats scratch by ~0.24 AUC; 20000: ~0.30)
    offline = online_config(tmp_path / "offline", **FAST)
    offline.ClearField("kafka_train_input")
    offline.file_train_input.paths.append(str(tmp_path / "train.csv"))
    offline_trainer = build_trainer(offline, online=False)
    offline_summary = offline_trainer.run()
    assert offline_summary.samples == 10000 and offline_summary.stop_reason == "input ended"

    _stream_to(broker, topic, 3000, start=20000)
    online = online_config(tmp_path / "online", broker.bootstrap, topic,
                           **dict(FAST, **{"train_config.fine_tune_checkpoint": str(tmp_path / "offline")}))
    trainer = build_trainer(online, online=False)
    assert trainer.restored_from == offline_summary.checkpoint
    # The tables start with the offline run's rows (its final checkpoint's), equal value for value.
    for name in trainer.model.tables.embeddings:
        keys, values = trainer.model.tables.rows(name).export()
        ref_keys, ref_values = offline_trainer.model.tables.rows(name).export()
        order, ref_order = np.argsort(keys.numpy()), np.argsort(ref_keys.numpy())
        np.testing.assert_array_equal(keys.numpy()[order], ref_keys.numpy()[ref_order])
        np.testing.assert_array_equal(values.numpy()[order], ref_values.numpy()[ref_order])
    # Its Kafka positions come from the config (earliest), not from the offline checkpoint.
    summary = trainer.run()
    assert summary.samples == 3000
    assert summary.positions == {0: 750, 1: 750}
    # A restart resumes from its own checkpoint, not from fine_tune_checkpoint again.
    restarted = build_trainer(online, online=False)
    assert restarted.restored_from == summary.checkpoint
    assert restarted.checkpointer.positions == {0: 750, 1: 750}
    assert restarted.run().samples == 0
    # Starting from the offline model beats starting from scratch on the same samples.
    scratch = build_trainer(online_config(tmp_path / "scratch", broker.bootstrap, topic, **FAST), online=False).run()
    assert scratch.samples == 3000
    assert summary.auc > scratch.auc + 0.05, (summary.auc, scratch.auc)


@pytest.fixture(scope="module")
def learning_samples(tmp_path_factory):
    """The 30,000 lines each model and optimizer learns from: one file for all (each write costs ~1 s of CPU)."""
    path = tmp_path_factory.mktemp("learning") / "train.csv"
    _write_csv(path, 30000)
    return path


@pytest.mark.parametrize("model_class, optimizer", [("wide_and_deep", "ftrl_optimizer"), ("dnn", "adagrad_optimizer"),
                                                    ("deepfm", "sgd_optimizer")])
def test_every_model_and_optimizer_learns(tmp_path, learning_samples, model_class, optimizer):
    lr = {"adagrad_optimizer": 0.3, "ftrl_optimizer": 0.5, "sgd_optimizer": 0.5}[optimizer]
    config = online_config(tmp_path / "m", **dict(FAST, **{"model_config.model_class": model_class}))
    config.ClearField("kafka_train_input")
    config.file_train_input.paths.append(str(learning_samples))
    config.model_config.ClearField("deepfm")
    getattr(config.train_config.optimizer_config, optimizer).learning_rate = lr
    summary = build_trainer(config, online=False).run()
    assert summary.samples == 30000
    assert summary.auc > 0.62, summary.auc  # chance is 0.5; Adam on this stream reaches ~0.8


def test_keras3_already_loaded_is_a_clear_error():
    code = "import tensorflow as tf, sys; tf.keras.layers.Dense; import easyonline"
    env = python_env()
    env.pop("TF_USE_LEGACY_KERAS", None)
    proc = subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "KerasVersionError" in proc.stderr and "TF_USE_LEGACY_KERAS" in proc.stderr


@pytest.mark.parametrize("sparse_optimizer", ["", "adagrad_optimizer"])
def test_checkpoint_restores_tables_and_optimizer_slots_exactly(tmp_path, sparse_optimizer):
    """One optimizer (Adam) for the whole model, or Adagrad for the tables and Adam for the dense part."""
    _write_csv(tmp_path / "train.csv", 3000)
    config = online_config(tmp_path / "m", **FAST)
    config.ClearField("kafka_train_input")
    config.file_train_input.paths.append(str(tmp_path / "train.csv"))
    if sparse_optimizer:
        getattr(config.train_config.sparse_optimizer_config, sparse_optimizer).learning_rate = 0.05
    first = build_trainer(config, online=False)
    first.run()
    second = build_trainer(config, online=False)
    slots = {len(layer.optimizer_vars) for layer in first.model.tables.embeddings.values()}
    assert slots == {1}  # Adagrad's accumulator, or Adam's m and v side by side (train/table_adam.py)
    widths = {first.model.tables.row_width(name) for name in first.model.tables.embeddings}
    assert {layer.optimizer_vars[0].dim for layer in first.model.tables.embeddings.values()} == \
        (widths if sparse_optimizer else {2 * width for width in widths})
    if sparse_optimizer:
        dense_slots = [v for v in first.optimizer.dense.variables() if "/m:" in v.name or "/v:" in v.name]
        assert dense_slots and all("DynamicEmbedding" not in v.name for v in dense_slots)
        for a, b in zip(first.optimizer.dense.variables(), second.optimizer.dense.variables()):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert int(second.checkpointer.step.numpy()) == int(first.checkpointer.step.numpy()) > 0
    # TFRA's buffers of the last batch's rows (a table's and its slots') are not saved: they were a third of
    # a save's time, and the restore below is exact without them
    saved = [name for name, _ in tf.train.list_variables(first.last_checkpoint)]
    assert any("-parameter/0/.ATTRIBUTES/table-values" in name for name in saved)
    assert not [name for name in saved if "/shadow/.ATTRIBUTES/" in name or "/shadow/.OPTIMIZER_SLOT/" in name]

    for name, layer in first.model.tables.embeddings.items():
        other = second.model.tables.embeddings[name]
        for a, b in [(layer.params, other.params)] + list(zip(layer.optimizer_vars, other.optimizer_vars)):
            (ka, va), (kb, vb) = sorted_rows(a), sorted_rows(b)
            assert len(ka) > 0
            np.testing.assert_array_equal(ka, kb)
            np.testing.assert_array_equal(va, vb)
    for a, b in zip(first.model.trainable_weights, second.model.trainable_weights):
        if "DynamicEmbedding" not in a.name:
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_a_checkpoint_with_adams_m_and_v_apart_restores_into_one_table(tmp_path, monkeypatch, caplog):
    """Checkpoints written before train/table_adam.py hold Adam's m and v of a table in two TFRA slot tables.
    One is written here by the trainer with that module's path switched off (TFRA's slots, as the code before
    it trained); today's trainer restores it: every id's m and v side by side in its one slot table, bit for
    bit, and it trains on from them."""
    import logging
    from easyonline.train import optimizers
    _write_csv(tmp_path / "train.csv", 1500)
    config = online_config(tmp_path / "m", **FAST)
    config.ClearField("kafka_train_input")
    config.file_train_input.paths.append(str(tmp_path / "train.csv"))
    with monkeypatch.context() as patch:
        patch.setattr(optimizers, "keep_slots_together", lambda optimizer: None)
        first = build_trainer(config, online=False)
        first.run()
    with caplog.at_level(logging.INFO, logger="easyonline.train.eager_engine"):
        second = build_trainer(config, online=False)
    assert "took Adam's m and v of" in caplog.text
    for name, layer in first.model.tables.embeddings.items():
        halves = {variable.name.rsplit("/", 1)[-1]: sorted_rows(variable) for variable in layer.optimizer_vars}
        assert sorted(halves) == ["m", "v"]
        (together,) = second.model.tables.embeddings[name].optimizer_vars
        keys, state = sorted_rows(together)
        assert len(keys) > 0
        np.testing.assert_array_equal(keys, halves["m"][0])
        np.testing.assert_array_equal(state, np.concatenate([halves["m"][1], halves["v"][1]], axis=1))
    name = sorted(second.model.tables.embeddings)[0]
    together = second.model.tables.embeddings[name].optimizer_vars[0]
    before = dict(zip(*(part.tolist() for part in sorted_rows(together))))
    _write_csv(tmp_path / "more.csv", 512, start=1500)
    parsed = second.parser.parse(open(tmp_path / "more.csv", "rb").read().splitlines())
    second.train_batch(parsed.features, parsed.labels)
    after = dict(zip(*(part.tolist() for part in sorted_rows(together))))
    moved = [key for key in before if after[key] != before[key]]
    assert moved and set(before) <= set(after)  # the restored m and v went on from where they were


def test_a_table_with_adams_state_in_its_rows_checkpoints_as_two_tables_did(tmp_path, monkeypatch):
    """The trainer keeps Adam's m and v in its tables' rows (embedding/rows_with_state.py), but its checkpoint
    holds what a table and its m-and-v slot table held, where they held it: so a trainer that keeps them apart
    (today's for tables too wide, every earlier one) restores it bit for bit, and it restores theirs. Both
    ways here: rows-with-state -> apart -> rows-with-state, each training on, each restore exact. The first
    trainer's saves fill the entries piece by piece, as a table of over a million rows does (every other test's
    small tables cut them from the export)."""
    from easyonline.embedding import rows_with_state
    from easyonline.embedding.rows_with_state import state_width
    from easyonline.train import eager_engine

    monkeypatch.setattr(rows_with_state, "SAVE_WHOLE_ROWS_AT_MOST", 0)

    def trainer_on(rows, start, apart=False):
        _write_csv(tmp_path / f"train{start}.csv", rows, start=start)
        config = online_config(tmp_path / "m", **FAST)
        config.ClearField("kafka_train_input")
        config.file_train_input.paths.append(str(tmp_path / f"train{start}.csv"))
        with monkeypatch.context() as patch:
            if apart:
                patch.setattr(eager_engine, "keeps_slots_together", lambda optimizer: False)
            return build_trainer(config, online=False)

    def state(trainer):
        """Every table's rows and m-and-v, by key."""
        out = {}
        for name, layer in trainer.model.tables.embeddings.items():
            (slots,) = layer.optimizer_vars
            out[name] = (sorted_rows(trainer.model.tables.rows(name)), sorted_rows(slots))
        return out

    def assert_same(a, b):
        assert a.keys() == b.keys()
        for name in a:
            for (keys_a, values_a), (keys_b, values_b) in zip(a[name], b[name]):
                assert len(keys_a) > 0
                np.testing.assert_array_equal(keys_a, keys_b)
                np.testing.assert_array_equal(values_a, values_b)

    first = trainer_on(1500, 0)
    assert all(state_width(layer.params) == layer.params.dim // 3 for layer in first.model.tables.embeddings.values())
    first.run()
    saved = dict(tf.train.list_variables(first.last_checkpoint))
    name = sorted(first.model.tables.embeddings)[0]
    width = first.model.tables.row_width(name)
    rows_key = [k for k in saved if re.search(rf"tables_of_emb_{name}-parameter/0/\.ATTRIBUTES/table-values$", k)]
    state_key = [k for k in saved if re.search(rf"emb_{name}-parameter\.Smv/0/\.ATTRIBUTES/table-values$", k)]
    assert len(rows_key) == len(state_key) == 1, sorted(saved)
    assert saved[rows_key[0]][1] == width and saved[state_key[0]][1] == 2 * width  # as the two tables wrote them

    trained = state(first)
    assert all(np.any(m_and_v[1] != 0.0) for _, m_and_v in trained.values())  # (Adam's state, not zeros)
    apart = trainer_on(1000, 1500, apart=True)
    assert not any(state_width(layer.params) for layer in apart.model.tables.embeddings.values())
    assert_same(trained, state(apart))
    apart.run()
    together = trainer_on(10, 2500)
    assert_same(state(apart), state(together))


def test_status_lines_and_tensorboard_scalars_are_written(tmp_path, caplog):
    import logging
    import tensorflow as tf
    _write_csv(tmp_path / "train.csv", 5000)  # 20 steps: a line and scalars every 0.05 s of them
    config = online_config(tmp_path / "m", **dict(FAST, **{"train_config.log_step_count_secs": 0.05}))
    config.ClearField("kafka_train_input")
    config.file_train_input.paths.append(str(tmp_path / "train.csv"))
    with caplog.at_level(logging.INFO, logger="easyonline.status"):
        summary = build_trainer(config, online=False).run()
    # a file input has no Kafka positions: its summary printed 'positions {1: 0}' and 'offsets skipped 0'
    assert not [l for l in summary.lines() if l.startswith(("positions", "offsets skipped"))], summary.lines()
    assert "stopped because  input ended" in summary.lines()
    lines = [r.getMessage() for r in caplog.records if r.name == "easyonline.status"]
    assert lines and all("auc=" in l and "rate=" in l and "keys=" in l and "input_wait=" in l for l in lines)
    tags = set()
    for path in tf.io.gfile.glob(str(tmp_path / "m" / "train" / "events.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(v.tag for v in event.summary.value)
    assert {"prequential_auc", "prequential_logloss", "samples_per_sec", "table_keys_total"} <= tags


def test_a_topic_change_with_a_checkpoint_is_refused_or_starts_the_new_topic_as_configured(broker, topic, tmp_path):
    _stream_to(broker, topic, 2000)
    first = online_config(tmp_path / "m", broker.bootstrap, topic, **FAST)
    assert build_trainer(first, online=False).run().samples == 2000
    other = topic + "_new"
    _stream_to(broker, other, 1000)
    moved = online_config(tmp_path / "m", broker.bootstrap, other, **FAST)
    with pytest.raises(ConfigError, match=f"for topic '{topic}', the config reads '{other}'.*on_topic_change"):
        build_trainer(moved, online=False).run()
    moved.kafka_train_input.on_topic_change = moved.kafka_train_input.START_FROM_CONFIG
    summary = build_trainer(moved, online=False).run()
    assert summary.samples == 1000 and summary.start == "earliest"
    assert summary.positions == {0: 250, 1: 250}  # 2 lines per message
    assert "started from     earliest" in summary.lines()
    # the new checkpoint is the new topic's: a plain restart continues it
    moved.kafka_train_input.on_topic_change = moved.kafka_train_input.FAIL
    again = build_trainer(moved, online=False).run()
    assert again.samples == 0 and again.start == "checkpoint"


class StopAfterSeconds(Callback):
    """Stops the trainer ``seconds`` after its start (at a tick: no batch needs to come)."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.started = None

    def on_train_begin(self, trainer):
        self.started = time.time()

    def on_tick(self, trainer):
        if time.time() - self.started >= self.seconds:
            trainer.stop("test: enough status lines")


def test_the_rate_after_a_restart_counts_only_this_runs_samples(broker, topic, tmp_path, caplog):
    """Issue 54: the first status line after a restart said rate=75481/s with nothing trained yet (the rate
    counted every restored sample as trained in this run's first interval)."""
    import logging
    _stream_to(broker, topic, 4000)
    config = online_config(tmp_path / "m", broker.bootstrap, topic, **FAST)
    assert build_trainer(config, online=False).run().samples == 4000  # caught up: a checkpoint at 4000
    config.train_config.log_step_count_secs = 0.2
    caplog.clear()  # the first run's lines are not the restart's
    with caplog.at_level(logging.INFO, logger="easyonline.status"):
        summary = build_trainer(config, online=True, callbacks=[StopAfterSeconds(1.5)]).run()
    assert summary.samples == 0  # nothing new in the topic
    lines = [r.getMessage() for r in caplog.records if r.name == "easyonline.status"]
    assert lines and all("samples=4000 " in l for l in lines), lines
    assert all(" rate=0/s " in l for l in lines), lines
