"""Apache Kafka itself on 127.0.0.1: one broker or a three-broker KRaft cluster, started and stopped here.

The reference for every test of Kafka behaviour (the embedded tansu broker
keeps aborted transactions, and has no DeleteRecords, CreatePartitions,
SCRAM or replication). Each node is one JVM (``kafka.Kafka``, broker and
controller in one process, KRaft, no ZooKeeper) with a bounded heap, its
storage formatted here with the cluster's SCRAM users, and three listeners:

- ``PLAINTEXT``: for tests and tools, and between brokers; its principal is
  ``User:ANONYMOUS``, a super user, so it stands for a trusted internal
  listener (production would put it on a private network or drop it);
- ``SASL_SSL``: SCRAM-SHA-512 over TLS with a CA and broker certificates made
  per run (``ca_file``); ACLs apply here when ``acls`` is on;
- ``CONTROLLER``: the KRaft quorum.

Every JVM dies with the process that started it (PR_SET_PDEATHSIG: SIGKILL),
so a test run killed with SIGKILL leaves none behind. Measured here (2 cores,
2026-11-28): see docs/operations.md, "Running on Apache Kafka".

    python -m easyonline.tools.apache_kafka --install
    python -m easyonline.tools.apache_kafka --brokers 3 --create_topics samples:4:3
"""
import ctypes
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Dict, Iterable, List, Optional

from absl import flags

from easyonline.tools.apache_kafka_install import installed_libs, install, java_binary
from easyonline.tools.tls_certs import make_server_certificate
from easyonline.utils.cli import run_command
from easyonline.utils.kafka_ids import kafka_uuid_text
from easyonline.utils.net import free_port, wait_for_port

log = logging.getLogger(__name__)

ADMIN_USER = "admin"
ADMIN_PASSWORD = "admin-secret"

_LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.requests.name = kafka.request.logger
logger.requests.level = WARN
logger.controller.name = org.apache.kafka.controller
logger.controller.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def _die_with_parent_by_sigkill() -> None:
    """A JVM's SIGTERM handler waits for a clean shutdown (minutes when its peers are gone): SIGKILL."""
    try:
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _cluster_id() -> str:
    """A Kafka Uuid in its text form (URL-safe base64 of 16 bytes, no padding); never one starting with "-",
    which the storage tool would take for an option (Kafka's own Uuid.randomUuid skips those too)."""
    while True:
        text = kafka_uuid_text(uuid.uuid4())
        if not text.startswith("-"):
            return text


def _distinct_ports(host: str, count: int) -> List[int]:
    """``count`` free ports, all different (free_port may name one twice: nothing binds between two calls)."""
    ports: List[int] = []
    while len(ports) < count:
        port = free_port(host)
        if port not in ports:
            ports.append(port)
    return ports


class KafkaNode:
    """One broker+controller JVM of a cluster: its ports, folders and process."""

    def __init__(self, node_id: int, folder: str, host: str, ports: List[int]):
        self.node_id = node_id
        self.folder = folder
        self.host = host
        self.plaintext_port, self.sasl_ssl_port, self.controller_port = ports
        self.process: Optional[subprocess.Popen] = None

    @property
    def properties_path(self) -> str:
        return os.path.join(self.folder, "server.properties")

    @property
    def log_path(self) -> str:
        return os.path.join(self.folder, "server.log")

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


class ApacheKafka:
    """A KRaft cluster of ``brokers`` JVMs on loopback ports; use as a context manager.

    ``users`` are SCRAM-SHA-512 users (name -> password) created at format time, besides ``admin`` (a super
    user). ``quick_start`` (tests) compiles with the JIT's first tier only: a faster start, slower steady
    state; benchmarks turn it off. With ``acls`` the StandardAuthorizer is on and a SASL_SSL principal may do only what an ACL allows
    (``allow`` adds them); the PLAINTEXT listener stays open (see the module docstring).
    """

    def __init__(self, brokers: int = 1, users: Optional[Dict[str, str]] = None, acls: bool = False,
                 heap_mb: int = 256, work_dir: Optional[str] = None, host: str = "127.0.0.1",
                 settings: Optional[Dict[str, str]] = None, quick_start: bool = True):
        if not host.startswith("127."):
            raise ValueError("the test cluster binds loopback addresses only")
        self.host = host
        self.heap_mb = heap_mb
        self.quick_start = quick_start
        self.acls = acls
        self.settings = dict(settings or {})
        self.users = {ADMIN_USER: ADMIN_PASSWORD, **(users or {})}
        self._own_work_dir = work_dir is None
        self.work_dir = work_dir or tempfile.mkdtemp(prefix="apache-kafka-")
        ports = _distinct_ports(host, 3 * brokers)
        self.nodes = [KafkaNode(i + 1, os.path.join(self.work_dir, f"node{i + 1}"), host, ports[3 * i:3 * i + 3])
                      for i in range(brokers)]
        self.cluster_id = _cluster_id()
        self.certificate = None
        self.started_secs = 0.0

    # -- addresses -------------------------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """The PLAINTEXT listeners, ``host:port,...``."""
        return ",".join(f"{self.host}:{n.plaintext_port}" for n in self.nodes)

    @property
    def sasl_bootstrap(self) -> str:
        """The SASL_SSL listeners, ``host:port,...``."""
        return ",".join(f"{self.host}:{n.sasl_ssl_port}" for n in self.nodes)

    @property
    def ca_file(self) -> str:
        return self.certificate.ca_cert

    def kafka_python_security(self, user: str, password: Optional[str] = None) -> Dict[str, object]:
        """kafka-python settings of a SASL_SSL client logging in as ``user`` (its password unless given)."""
        return {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "ssl_cafile": self.ca_file,
                "sasl_plain_username": user,
                "sasl_plain_password": self.users.get(user, "") if password is None else password}

    def librdkafka_security(self, user: str, password: Optional[str] = None) -> Dict[str, object]:
        """The same for librdkafka (confluent-kafka)."""
        return {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512", "ssl.ca.location": self.ca_file,
                "sasl.username": user,
                "sasl.password": self.users.get(user, "") if password is None else password}

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self, timeout: float = 90.0) -> "ApacheKafka":
        """Formats every node's storage, starts the JVMs and waits until every broker serves metadata."""
        started = time.time()
        libs = installed_libs()
        os.makedirs(self.work_dir, exist_ok=True)
        self.certificate = make_server_certificate(os.path.join(self.work_dir, "tls"), "broker")
        for node in self.nodes:
            os.makedirs(node.folder, exist_ok=True)
            self._write_properties(node)
        formats = [self._format(node, libs) for node in self.nodes]
        for node, process in zip(self.nodes, formats):
            out, _ = process.communicate(timeout=120)
            if process.returncode:
                raise RuntimeError(f"formatting the storage of Kafka node {node.node_id} failed: {out[-2000:]}")
        for node in self.nodes:
            self._spawn(node, libs)
        self.wait_ready(timeout)
        self.started_secs = time.time() - started
        log.info("Apache Kafka: %d broker(s) ready in %.1f s on %s (SASL_SSL %s)", len(self.nodes),
                 self.started_secs, self.bootstrap, self.sasl_bootstrap)
        return self

    def _write_properties(self, node: KafkaNode) -> None:
        n = len(self.nodes)
        voters = ",".join(f"{m.node_id}@{self.host}:{m.controller_port}" for m in self.nodes)
        jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{self.host}:{node.plaintext_port},SASL_SSL://{self.host}:{node.sasl_ssl_port},"
                         f"CONTROLLER://{self.host}:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{node.plaintext_port},"
                                    f"SASL_SSL://{self.host}:{node.sasl_ssl_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": self.certificate.keystore,
            "log.dirs": os.path.join(node.folder, "data"),
            "num.partitions": "1",
            "default.replication.factor": str(min(3, n)),
            "offsets.topic.replication.factor": str(min(3, n)),
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": str(min(3, n)),
            "transaction.state.log.min.isr": str(min(2, n)),
            "transaction.state.log.num.partitions": "5",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "log.flush.interval.messages": str(2 ** 62),
            "unclean.leader.election.enable": "false",
            "super.users": f"User:ANONYMOUS;User:{ADMIN_USER}",
        }
        if self.acls:
            props["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
            props["allow.everyone.if.no.acl.found"] = "false"
        props.update(self.settings)
        with open(node.properties_path, "w", encoding="utf-8") as f:
            f.writelines(f"{k}={v}\n" for k, v in props.items())
        with open(os.path.join(node.folder, "log4j2.properties"), "w", encoding="utf-8") as f:
            f.write(_LOG4J2.format(log=node.log_path))

    def _jvm(self, node: KafkaNode, libs: str, heap_mb: int) -> List[str]:
        quick = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"] if self.quick_start else ["-XX:+UseG1GC"]
        return [java_binary(), f"-Xmx{heap_mb}m", f"-Xms{heap_mb}m", *quick,
                "-XX:MaxMetaspaceSize=96m", "-XX:MaxDirectMemorySize=128m", "-Xshare:auto", "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={os.path.join(node.folder, 'log4j2.properties')}",
                "-cp", os.path.join(libs, "*")]

    def _format(self, node: KafkaNode, libs: str) -> subprocess.Popen:
        command = self._jvm(node, libs, 128) + ["kafka.tools.StorageTool", "format", "--ignore-formatted",
                                                 "-t", self.cluster_id, "-c", node.properties_path]
        for user, password in self.users.items():
            command += ["--add-scram", f"SCRAM-SHA-512=[name={user},password={password}]"]
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=_die_with_parent_by_sigkill)

    def _spawn(self, node: KafkaNode, libs: Optional[str] = None) -> None:
        with open(os.path.join(node.folder, "stdout.log"), "ab") as out:
            node.process = subprocess.Popen(self._jvm(node, libs or installed_libs(), self.heap_mb)
                                            + ["kafka.Kafka", node.properties_path],
                                            stdout=out, stderr=subprocess.STDOUT,
                                            preexec_fn=_die_with_parent_by_sigkill)

    def wait_ready(self, timeout: float = 90.0, nodes: Optional[Iterable[KafkaNode]] = None) -> None:
        """Waits until each node listens and the cluster's metadata lists every live broker."""
        deadline = time.time() + timeout
        for node in nodes or self.nodes:
            if not node.alive:
                continue
            if not wait_for_port(self.host, node.plaintext_port, max(1.0, deadline - time.time()),
                                 alive=lambda n=node: n.alive):
                self._raise_not_ready(node, timeout)
        want = {n.node_id for n in self.nodes if n.alive}
        while time.time() < deadline:
            try:
                if self.live_brokers() >= want:
                    return
            except Exception:  # pylint: disable=broad-except  (not yet answering)
                pass
            time.sleep(0.3)
        raise RuntimeError(f"Apache Kafka on {self.bootstrap}: brokers {sorted(want)} not all registered within "
                           f"{timeout:.0f} s; logs in {self.work_dir}")

    def _raise_not_ready(self, node: KafkaNode, timeout: float) -> None:
        tail = ""
        if os.path.exists(node.log_path):
            with open(node.log_path, encoding="utf-8", errors="replace") as f:
                tail = "".join(line for line in f.readlines()[-200:] if " ERROR " in line)[-2000:]
        how = f"exited with {node.process.poll()}" if not node.alive else f"did not listen within {timeout:.0f} s"
        self.stop()
        raise RuntimeError(f"Apache Kafka node {node.node_id} {how}; its log is {node.log_path}\n{tail}")

    def kill(self, node_id: int) -> None:
        """SIGKILL one node (a crashed broker; its data stays on disk for ``restart``)."""
        node = self.node(node_id)
        if node.alive:
            node.process.kill()
            node.process.wait()

    def restart(self, node_id: int, timeout: float = 90.0) -> None:
        node = self.node(node_id)
        if not node.alive:
            self._spawn(node)
        self.wait_ready(timeout, [node])

    def node(self, node_id: int) -> KafkaNode:
        return next(n for n in self.nodes if n.node_id == node_id)

    def stop(self) -> None:
        for node in self.nodes:
            if node.alive:
                node.process.terminate()
        deadline = time.time() + 15
        for node in self.nodes:
            if node.process is not None:
                try:
                    node.process.wait(timeout=max(0.1, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    node.process.kill()
                    node.process.wait()
                node.process = None
        if self._own_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> "ApacheKafka":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- admin -----------------------------------------------------------------------------------------------

    def admin(self, **settings):
        from kafka.admin import KafkaAdminClient  # pylint: disable=g-import-not-at-top
        settings.setdefault("bootstrap_servers", self.bootstrap)
        return KafkaAdminClient(client_id="easyonline-admin", request_timeout_ms=30000, **settings)

    def live_brokers(self) -> set:
        admin = self.admin()
        try:
            return {b["broker_id"] for b in admin.describe_cluster()["brokers"] if not b.get("is_fenced")}
        finally:
            admin.close()

    def create_topic(self, topic: str, partitions: int = 1, replication: Optional[int] = None,
                     configs: Optional[Dict[str, str]] = None) -> None:
        """Creates ``topic`` (replication: all brokers up to 3 by default) and waits until each partition has
        a leader."""
        from kafka.admin import NewTopic  # pylint: disable=g-import-not-at-top
        from kafka.errors import TopicAlreadyExistsError  # pylint: disable=g-import-not-at-top
        admin = self.admin()
        try:
            admin.create_topics([NewTopic(topic, partitions, replication or min(3, len(self.nodes)),
                                          topic_configs=configs or {})])
        except TopicAlreadyExistsError:
            pass
        finally:
            admin.close()
        self.wait_for_leaders(topic, partitions)

    def wait_for_leaders(self, topic: str, partitions: int, timeout: float = 30.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            leaders = self.leaders(topic)
            if len(leaders) >= partitions and all(l >= 0 for l in leaders.values()):
                return
            time.sleep(0.2)
        raise RuntimeError(f"topic {topic}: not every partition has a leader after {timeout:.0f} s")

    def describe_topic(self, topic: str) -> dict:
        """Kafka's description of ``topic``: ``topic_id`` and each partition's ``partition_index``,
        ``leader_id``, ``replica_nodes``, ``isr_nodes``."""
        admin = self.admin()
        try:
            return admin.describe_topics([topic])[0]
        finally:
            admin.close()

    def leaders(self, topic: str) -> Dict[int, int]:
        """partition -> the node id leading it (-1: none; {} while the topic is not known)."""
        try:
            described = self.describe_topic(topic)
        except Exception:  # pylint: disable=broad-except  (not yet known)
            return {}
        if described.get("error_code", 0):
            return {}
        return {p["partition_index"]: p["leader_id"] for p in described.get("partitions", [])}

    def replicas(self, topic: str) -> Dict[int, List[int]]:
        """partition -> the node ids holding a replica."""
        return {p["partition_index"]: list(p["replica_nodes"]) for p in self.describe_topic(topic)["partitions"]}

    def topic_id(self, topic: str) -> str:
        """The topic's id as Kafka's tools print it (and checkpoints save it)."""
        return kafka_uuid_text(uuid.UUID(str(self.describe_topic(topic)["topic_id"])))

    def log_ends(self, topic: str) -> Dict[int, int]:
        """partition -> its log end offset (records, aborted ones and transaction markers included)."""
        from kafka import KafkaConsumer, TopicPartition  # pylint: disable=g-import-not-at-top
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap)
        try:
            tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
            ends = consumer.end_offsets(tps)
        finally:
            consumer.close()
        return {tp.partition: ends[tp] for tp in tps}

    def delete_records(self, topic: str, before: Dict[int, int]) -> None:
        """DeleteRecords: the log of each partition starts at ``before[p]`` afterwards (what retention does)."""
        from kafka import TopicPartition  # pylint: disable=g-import-not-at-top
        admin = self.admin()
        try:
            admin.delete_records({TopicPartition(topic, p): o for p, o in before.items()})
        finally:
            admin.close()

    def create_partitions(self, topic: str, total: int) -> None:
        from kafka.admin import NewPartitions  # pylint: disable=g-import-not-at-top
        admin = self.admin()
        try:
            admin.create_partitions({topic: NewPartitions(total)})
        finally:
            admin.close()
        self.wait_for_leaders(topic, total)

    def delete_topic(self, topic: str, timeout: float = 30.0) -> None:
        """Deletes ``topic`` and waits until the cluster no longer lists it."""
        admin = self.admin()
        try:
            admin.delete_topics([topic])
            deadline = time.time() + timeout
            while topic in admin.list_topics() and time.time() < deadline:
                time.sleep(0.2)
        finally:
            admin.close()

    def allow(self, user: str, resource: str, name: str, operations: Iterable[str],
              pattern: str = "LITERAL") -> None:
        """ACLs: ``User:user`` may do ``operations`` (READ, WRITE, DESCRIBE, ...) on the resource ``resource``
        (TOPIC, GROUP, TRANSACTIONAL_ID, CLUSTER) named ``name`` (``pattern`` LITERAL or PREFIXED)."""
        from kafka.admin import (ACL, ACLOperation, ACLPermissionType, ResourcePattern,  # pylint: disable=g-import-not-at-top
                                 ResourceType, ACLResourcePatternType)
        acls = [ACL(f"User:{user}", "*", ACLOperation[op], ACLPermissionType.ALLOW,
                    ResourcePattern(ResourceType[resource], name, ACLResourcePatternType[pattern]))
                for op in operations]
        admin = self.admin()
        try:
            result = admin.create_acls(acls)
        finally:
            admin.close()
        if result.get("failed"):
            raise RuntimeError(f"creating ACLs failed: {result['failed']}")

    def run_tool(self, main_class: str, *args: str, timeout: float = 120.0) -> str:
        """Runs one of Kafka's own command-line tools (e.g. the consumer-group tool) from the same jars."""
        command = [java_binary(), "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", os.path.join(installed_libs(), "*"),
                   f"-Dlog4j2.configurationFile={os.path.join(self.nodes[0].folder, 'log4j2.properties')}", main_class,
                   *args]
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout, check=False, preexec_fn=_die_with_parent_by_sigkill)
        if done.returncode:
            raise RuntimeError(f"{main_class} exited with {done.returncode}: {done.stdout[-2000:]}")
        return done.stdout


def define_flags() -> None:
    """Defined on demand, so importing this module never clashes with other commands' flags."""
    flags.DEFINE_bool("install", False, "Only resolve Apache Kafka's jars with Maven into the cache (once) and exit.")
    flags.DEFINE_integer("brokers", 1, "How many broker+controller JVMs (1 or 3).")
    flags.DEFINE_integer("heap_mb", 256, "The JVM heap of each node, MB.")
    flags.DEFINE_bool("acls", False, "Turn on the StandardAuthorizer (ACLs apply to SASL_SSL principals).")
    flags.DEFINE_list("users", [], "SCRAM-SHA-512 users to create, as name:password (admin:admin-secret always).")
    flags.DEFINE_string("create_topics", "",
                        "Comma-separated topic:partitions[:replication] to create, e.g. samples:4:3,updates:1.")
    flags.DEFINE_string("work_dir", "", "Folder for the nodes' storage, logs and certificates (default: a "
                        "temporary one, deleted at exit).")


def main(argv) -> int:
    del argv
    FLAGS = flags.FLAGS
    if FLAGS.install:
        print(f"Apache Kafka's jars: {install(quiet=False)}", flush=True)
        return 0
    install()
    users = dict(u.split(":", 1) for u in FLAGS.users)
    cluster = ApacheKafka(FLAGS.brokers, users=users, acls=FLAGS.acls, heap_mb=FLAGS.heap_mb,
                          work_dir=FLAGS.work_dir or None)
    with cluster:
        for spec in filter(None, FLAGS.create_topics.split(",")):
            parts = spec.split(":")
            cluster.create_topic(parts[0], int(parts[1]) if len(parts) > 1 else 1,
                                 int(parts[2]) if len(parts) > 2 else None)
        print(f"Apache Kafka ready in {cluster.started_secs:.1f} s: PLAINTEXT {cluster.bootstrap}, SASL_SSL "
              f"(SCRAM-SHA-512) {cluster.sasl_bootstrap}, CA {cluster.ca_file}; Ctrl-C stops it", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            while all(n.alive for n in cluster.nodes):
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


def run() -> None:
    run_command(define_flags, main)


if __name__ == "__main__":
    run()
