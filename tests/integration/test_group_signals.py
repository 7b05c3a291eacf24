"""Ctrl-C in a terminal signals the trainer's whole process group, its Kafka reader process included.

The reader must leave the stop to the trainer (issue 54: it died of the KeyboardInterrupt and the trainer
failed with "the Kafka reader process died", exit code 1 and no summary). The trainer runs here in a
session of its own, as a terminal's foreground job is, and the signal goes to the group (os.killpg).
"""
import json
import os
import signal
import socket
import subprocess
import time

import pytest

from easyonline.tools.stream_producer import SyntheticCtrStream, produce
from easyonline.utils import preloaded_python
from tests.conftest import PYTHON, SAMPLES, python_env


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("signum, update_broker", [(signal.SIGINT, "reachable"), (signal.SIGTERM, "unreachable")])
def test_a_signal_to_the_whole_group_stops_the_trainer_cleanly(broker, topic, tmp_path, signum, update_broker):
    broker.create_topic(topic, 2)
    produce(broker.bootstrap, topic, SyntheticCtrStream().chunks(0, 3000), lines_per_message=2, partitions=2)
    updates = broker.bootstrap if update_broker == "reachable" else f"127.0.0.1:{_closed_port()}"
    edits = {"data_config.batch_size": 256, "data_config.batch_timeout_ms": 200,
             "train_config.log_step_count_secs": 0.5, "train_config.save_checkpoints_secs": 0,
             "kafka_train_input.server": broker.bootstrap, "kafka_train_input.topic": topic,
             "train_config.incr_save_config.kafka.server": updates,
             "train_config.incr_save_config.kafka.topic": topic + "_updates",
             "train_config.incr_save_config.flush_timeout_secs": 3}
    proc = preloaded_python.Popen([PYTHON, "-m", "easyonline.train", f"--config={os.path.join(SAMPLES, 'online.config')}",
                             "--online", f"--model_dir={tmp_path / 'm'}", f"--edit_config_json={json.dumps(edits)}"],
                            env=python_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own group, as a terminal's foreground job
    try:
        output = []
        deadline = time.time() + 180
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            output.append(line)
            if "step=" in line and "samples=3000 " in line:  # trained, and the reader idles at the end
                break
        assert any("samples=3000 " in line for line in output), "".join(output[-30:])
        os.killpg(proc.pid, signum)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = "".join(output) + rest
    assert proc.returncode == 0, text[-4000:]
    assert f"received {signal.Signals(signum).name}" in rest
    assert "training summary" in rest and "samples          3000" in rest, rest[-3000:]
    for bad in ("Traceback", "KeyboardInterrupt", "reader process died", "reading the input failed"):
        assert bad not in text, text[-4000:]


HOLDER = """
import sys, time
from easyonline.inputs.reader_process import KafkaReaderProcess
from easyonline.protos import pipeline_pb2
reader = KafkaReaderProcess(pipeline_pb2.KafkaInput(server=sys.argv[1], topic=sys.argv[2]), 100, 200)
print(reader.pid, flush=True)
time.sleep(600)
"""


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_reader_ignores_the_groups_signals_and_still_dies_with_a_killed_trainer(broker, topic):
    """It ignores SIGTERM now, so its death with the trainer is SIGKILL (PR_SET_PDEATHSIG)."""
    broker.create_topic(topic, 1)
    holder = subprocess.Popen([PYTHON, "-c", HOLDER, broker.bootstrap, topic], env=python_env(),
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        reader = int(holder.stdout.readline())
        assert _alive(reader)
        os.kill(reader, signal.SIGINT)
        os.kill(reader, signal.SIGTERM)
        time.sleep(1)
        assert _alive(reader)  # left to the trainer, which closes it
        holder.kill()  # the trainer killed outright (SIGKILL, the OOM killer)
        holder.wait()
        deadline = time.time() + 10
        while _alive(reader) and time.time() < deadline:
            time.sleep(0.1)
        assert not _alive(reader)
    finally:
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait()
