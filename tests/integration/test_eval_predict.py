"""The evaluation job follows a running trainer; the prediction job scores a file and a topic; CLI == API."""
import json
import os
import subprocess
import time
import urllib.request

import numpy as np
import tensorflow as tf
from kafka import KafkaConsumer, TopicPartition

import easyonline
from easyonline.features.record_parser import make_parser
from easyonline.inputs import KafkaInput
from easyonline.scoring.checkpoint_model import CheckpointModel
from easyonline.tools.stream_producer import SyntheticCtrStream, produce
from easyonline.checkpoint.checkpointer import latest_checkpoint
from easyonline.utils.net import free_port
from easyonline.utils import preloaded_python
from tests.conftest import PYTHON, online_config, python_env

FAST = {"data_config.batch_size": 500, "data_config.batch_timeout_ms": 300, "train_config.log_step_count_secs": 1,
        "train_config.stop_signal_poll_secs": 0.2, "train_config.save_checkpoints_secs": 0}


def _cli(verb, *args, timeout=240):
    return preloaded_python.run([PYTHON, "-m", f"easyonline.{verb}", *args], env=python_env(), capture_output=True,
                          text=True, timeout=timeout)


def _write_config(config, path):
    from easyonline.config.loader import to_text
    path.write_text(to_text(config))
    return str(path)


def _read_topic(bootstrap, topic, count, timeout=60):
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, 0)])
    values, deadline = [], time.time() + timeout
    while len(values) < count and time.time() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            values.extend(r.value for r in records)
    consumer.close()
    return values


def test_eval_job_follows_a_running_trainer_one_result_per_checkpoint(broker, topic, tmp_path):
    broker.create_topic(topic, 2)
    broker.create_topic(topic + "_eval", 1)
    produce(broker.bootstrap, topic, SyntheticCtrStream().chunks(0, 30000), partitions=2)
    produce(broker.bootstrap, topic + "_eval", SyntheticCtrStream().chunks(500000, 3000))
    model_dir = tmp_path / "m"
    config = online_config(model_dir, broker.bootstrap, topic, **FAST, **{
        "train_config.save_checkpoints_steps": 12, "train_config.keep_checkpoint_max": 100,
        "kafka_eval_input.server": broker.bootstrap, "kafka_eval_input.topic": topic + "_eval"})
    config.eval_config.metrics_set.add().gauc.uid_field = "C1"  # EasyRec's grouped AUC, by one id feature's ids
    config_path = _write_config(config, tmp_path / "online.config")
    trainer = preloaded_python.Popen([PYTHON, "-m", "easyonline.train", f"--config={config_path}", "--online"],
                               env=python_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = free_port()
    evaluator = preloaded_python.Popen([PYTHON, "-m", "easyonline.eval", f"--config={config_path}", "--poll_secs=0.5",
                                  "--stop_grace_secs=8", f"--metrics_port={port}"], env=python_env(),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    scraped = ""
    try:
        deadline = time.time() + 180
        while time.time() < deadline:
            state = tf.train.get_checkpoint_state(str(model_dir))
            scraped = _scrape(port) or scraped
            if state and state.model_checkpoint_path.endswith("-60") and "easyonline_eval_auc " in scraped:
                break  # 30000 samples / 500
            time.sleep(0.5)
        (model_dir / "OSS_STOP_SIGNAL").write_text("")
        trainer_out, _ = trainer.communicate(timeout=120)
        assert trainer.returncode == 0, trainer_out[-3000:]
        out, err = evaluator.communicate(timeout=180)
    finally:
        for proc in (trainer, evaluator):
            if proc.poll() is None:
                proc.kill()
    assert evaluator.returncode == 0, err[-3000:]
    assert "found stop signal" in err
    results = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    saved = sorted(int(p.rsplit("-", 1)[1]) for p in tf.train.get_checkpoint_state(str(model_dir))
                   .all_model_checkpoint_paths)
    assert saved == [12, 24, 36, 48, 60]
    assert [r["step"] for r in results] == saved  # one result per checkpoint, in order
    assert all(r["samples"] == 3000 for r in results)
    assert results[-1]["auc"] > 0.6 and results[-1]["logloss"] < results[0]["logloss"] + 0.05
    assert all(0 < r["gauc"] <= 1 and r["session_auc"] is None for r in results)
    assert results[-1]["gauc"] != results[-1]["auc"] and " gauc=" in err
    with open(model_dir / "eval" / "results.jsonl") as f:
        assert [json.loads(l)["step"] for l in f] == saved
    events = [e for name in os.listdir(model_dir / "eval") if name.startswith("events")
              for e in tf.compat.v1.train.summary_iterator(str(model_dir / "eval" / name))]
    auc_steps = sorted(e.step for e in events for v in e.summary.value if v.tag == "eval_auc")
    assert auc_steps == saved
    assert sorted(e.step for e in events for v in e.summary.value if v.tag == "eval_gauc") == saved
    # --metrics_port served the latest evaluation's figures while it ran.
    figures = {line.split()[0]: float(line.split()[1]) for line in scraped.splitlines() if not line.startswith("#")}
    assert figures["easyonline_eval_evaluations_total"] >= 1 and figures["easyonline_eval_samples"] == 3000
    assert 0.5 < figures["easyonline_eval_auc"] <= 1 and int(figures["easyonline_eval_checkpoint_step"]) in saved
    assert 0 < figures["easyonline_eval_gauc"] <= 1 and "easyonline_eval_session_auc" not in figures
    assert "# TYPE easyonline_eval_evaluations_total counter" in scraped


def _scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            return response.read().decode()
    except OSError:
        return ""


def test_predict_scores_a_file_with_a_checkpoint_and_a_topic_with_an_export(broker, topic, tmp_path):
    train = tmp_path / "train.csv"
    with open(train, "wb") as f:
        for chunk in SyntheticCtrStream().chunks(0, 4000):
            f.write(b"\n".join(chunk) + b"\n")
    config = online_config(tmp_path / "m", **FAST)
    config.ClearField("kafka_train_input")
    config.file_train_input.paths.append(str(train))
    easyonline.online_train(config, online=False)
    config_path = _write_config(config, tmp_path / "offline.config")

    lines = SyntheticCtrStream().lines(900000, 1500)
    bad = [b"1,2,3", b"x" * 10]
    scored = tmp_path / "in.csv"
    scored.write_bytes(b"\n".join(lines[:700] + bad + lines[700:]) + b"\n")
    out_file = tmp_path / "out" / "pred.tsv"
    proc = _cli("predict", f"--config={config_path}", f"--input_path={scored}", f"--output_path={out_file}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "scored 1500 samples" in proc.stdout and "rejected 2" in proc.stdout, proc.stdout
    assert "(columns: probs, sample)" in proc.stdout  # one binary task: the one column, named as serving names it
    rows = [line.split(b"\t", 1) for line in out_file.read_bytes().splitlines()]
    assert [row[1] for row in rows] == lines
    file_probs = np.array([float(row[0]) for row in rows])
    model = CheckpointModel(config)
    model.restore(latest_checkpoint(config.model_dir))
    parsed = make_parser(model.specs, config.data_config).parse(lines)
    np.testing.assert_allclose(file_probs, model.score(parsed.features), atol=2e-6)
    assert file_probs.std() > 0.01  # a trained model, not a constant

    export = _cli("export", f"--config={config_path}", f"--export_dir={tmp_path / 'export'}")
    assert export.returncode == 0, export.stderr[-3000:]
    broker.create_topic(topic, 2)
    broker.create_topic(topic + "_scores", 1)
    produce(broker.bootstrap, topic, [lines], lines_per_message=3, partitions=2)
    proc = _cli("predict", f"--export_dir={tmp_path / 'export'}", f"--input_topic={topic}",
                f"--kafka_server={broker.bootstrap}", f"--output_topic={topic}_scores")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "scored 1500 samples" in proc.stdout, proc.stdout
    by_line = dict(zip(lines, file_probs))
    values = _read_topic(broker.bootstrap, topic + "_scores", 1500)
    assert len(values) == 1500
    topic_rows = [v.split(b"\t", 1) for v in values]
    assert sorted(row[1] for row in topic_rows) == sorted(lines)
    np.testing.assert_allclose([float(row[0]) for row in topic_rows], [by_line[row[1]] for row in topic_rows],
                               atol=2e-6)


def test_predict_and_eval_name_what_is_missing(tmp_path):
    config = online_config(tmp_path / "m")
    config_path = _write_config(config, tmp_path / "c.config")
    proc = _cli("predict", f"--config={config_path}", f"--input_path={tmp_path}/none.csv",
                f"--output_path={tmp_path}/o")
    assert proc.returncode == 3 and "no checkpoint at" in proc.stderr
    proc = _cli("predict", f"--config={config_path}", f"--output_path={tmp_path}/o")
    assert proc.returncode == 2 and "--input_path" in proc.stderr
    proc = _cli("predict", f"--config={config_path}", f"--input_path={tmp_path}/none.csv", "--output_topic=t",
                "--output_header")
    assert proc.returncode == 2 and "--output_header needs --output_path" in proc.stderr
    proc = _cli("eval", f"--config={config_path}", "--once")
    assert proc.returncode == 2 and "kafka_eval_input" in proc.stderr


def test_cli_and_api_train_the_same_model_on_the_same_stream(broker, topic, tmp_path):
    broker.create_topic(topic, 1)
    produce(broker.bootstrap, topic, SyntheticCtrStream().chunks(0, 6000))
    edits = dict(FAST, **{"data_config.batch_timeout_ms": 5000})
    cli_config = online_config(tmp_path / "cli", broker.bootstrap, topic, **edits)
    proc = _cli("train", f"--config={_write_config(cli_config, tmp_path / 'cli.config')}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "positions        {0: 6000}" in proc.stdout

    api_config = online_config(tmp_path / "api", broker.bootstrap, topic, **edits)
    source = KafkaInput(api_config.kafka_train_input, 500, 5000)
    summary = easyonline.online_train(api_config, source, online=False)
    assert summary.positions == {0: 6000} and summary.steps == 12

    cli_model, api_model = CheckpointModel(cli_config), CheckpointModel(api_config)
    assert cli_model.restore(latest_checkpoint(cli_config.model_dir)) == api_model.restore(
        latest_checkpoint(api_config.model_dir)) == 12
    assert cli_model.model.tables.sizes() == api_model.model.tables.sizes()
    for a, b in zip(cli_model.model.trainable_weights, api_model.model.trainable_weights):
        if "DynamicEmbedding" not in a.name:
            np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)
    probe = make_parser(cli_model.specs, cli_config.data_config).parse(SyntheticCtrStream().lines(0, 3000))
    np.testing.assert_allclose(cli_model.score(probe.features), api_model.score(probe.features), atol=1e-5)
