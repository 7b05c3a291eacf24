"""The Apache Kafka launcher as a user and a killed test run meet it: its CLI starts a broker that serves
topics on both listeners, and a SIGKILL of the launcher leaves no JVM behind."""
import os
import signal
import subprocess
import time

from kafka import KafkaConsumer

from tests.conftest import PYTHON, python_env


def _children(pid: int) -> list:
    with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
        return [int(p) for p in f.read().split()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_cli_starts_a_broker_with_its_topics_and_a_sigkill_of_it_leaves_no_jvm(tmp_path):
    proc = subprocess.Popen([PYTHON, "-m", "easyonline.tools.apache_kafka", "--create_topics", "samples:3",
                             f"--work_dir={tmp_path}"], env=python_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        ready = ""
        deadline = time.time() + 120
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line or "Apache Kafka ready" in line:
                ready = line
                break
        assert "Apache Kafka ready" in ready, ready
        plaintext = ready.split("PLAINTEXT ")[1].split(",")[0]
        assert "SASL_SSL (SCRAM-SHA-512) 127.0.0.1:" in ready and os.path.exists(tmp_path / "tls" / "ca.pem")
        consumer = KafkaConsumer(bootstrap_servers=plaintext)
        assert consumer.partitions_for_topic("samples") == {0, 1, 2}
        consumer.close()
        jvms = [pid for pid in _children(proc.pid) if _alive(pid)]
        assert len(jvms) == 1
        with open(f"/proc/{jvms[0]}/cmdline", "rb") as f:
            command = f.read().split(b"\0")
        assert b"kafka.Kafka" in command and b"-Xmx256m" in command
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.time() + 10
    while time.time() < deadline and _alive(jvms[0]):
        time.sleep(0.1)
    assert not _alive(jvms[0]), "the broker's JVM outlived the launcher"
