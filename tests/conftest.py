"""Shared fixtures: Apache Kafka and the embedded local broker (tansu) on 127.0.0.1, and small configs.

Tests of Kafka behaviour (transactions, retention, partitions, security, broker failures) use
``apache_kafka``; tests where Kafka's semantics are not the point use the quicker ``broker`` (tansu).
"""
import contextlib
import itertools
import os
import sys
import threading

import pytest

import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.config import load_pipeline_config
from easyonline.tools.apache_kafka import ApacheKafka
from easyonline.tools.local_broker import LocalBroker
from easyonline.utils.preloaded_python import PreloadedServers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "samples")
_topic_ids = itertools.count()


def pytest_configure(config):
    config.addinivalue_line("markers", "scenario: a production scenario of minutes (random kills, a long soak); "
                                       "CI (CI=true) skips it to keep the suite under 25 minutes; "
                                       "SCENARIOS=1 or a run without CI=true includes it")


def pytest_collection_modifyitems(config, items):
    """CI skips the ``scenario`` tests, naming how to run them; every other run includes them. The modules that
    use the session's Apache Kafka run first, so it stops when the last of them ends (``_stop_kafka_when_done``)."""
    if os.environ.get("CI") == "true" and os.environ.get("SCENARIOS") != "1":
        skip = pytest.mark.skip(reason="a scenario of minutes: CI skips it; run with SCENARIOS=1 (README.md)")
        for item in items:
            if "scenario" in item.keywords:
                item.add_marker(skip)
    kafka_modules = {item.module for item in items if _uses_session_kafka(item)}
    items.sort(key=lambda item: item.module not in kafka_modules)  # (stable: each module's order is kept)
    users = [item for item in items if _uses_session_kafka(item)]
    _SESSION_KAFKA["last_user"] = users[-1].nodeid if users else None


def _uses_session_kafka(item) -> bool:
    names = getattr(item, "fixturenames", ())
    return "apache_kafka" in names or (
        "broker" in names and getattr(getattr(item, "module", None), "BROKER", "") == "apache_kafka")


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """Stops the session's Apache Kafka after the teardown of the last test that uses it (and of its module's
    fixtures): its JVM's idle CPU (~1-2% of a core) would otherwise last the whole session, on CI's 2 cores."""
    yield
    if item.nodeid == _SESSION_KAFKA.get("last_user") and _SESSION_KAFKA.get("kafka") is not None:
        _SESSION_KAFKA.pop("kafka").stop()


_SESSION_KAFKA: dict = {}  # {"kafka": the running ApacheKafka, "last_user": the node id of the last test using it}


@pytest.fixture(scope="session", autouse=True)
def preloaded_commands(request, tmp_path_factory):
    """The suite's ``python -m easyonline.<verb>`` children (started with ``preloaded_python.Popen``/``run``) are
    forked from servers that imported TensorFlow once: about 4.8 s of CPU less each (easyonline/utils/
    preloaded_python.py says what is and is not the same as a new process). Only for a session with integration
    tests; ``PRELOADED_PYTHON=0`` starts every command as a new process."""
    wanted = os.environ.get("PRELOADED_PYTHON") != "0" and any(
        "tests/integration/" in item.nodeid for item in request.session.items)
    if not wanted:
        yield None
        return
    with PreloadedServers(str(tmp_path_factory.mktemp("preloaded")), env=python_env()) as servers:
        yield servers


@pytest.fixture(scope="session")
def local_broker(tmp_path_factory):
    log = tmp_path_factory.mktemp("broker") / "broker.log"
    with LocalBroker(log_path=str(log)) as b:
        yield b


@pytest.fixture(scope="module")
def broker(request):
    """The session's embedded broker (tansu); Apache Kafka's in a module that sets ``BROKER = "apache_kafka"``
    (Kafka semantics are its point)."""
    return request.getfixturevalue(getattr(request.module, "BROKER", "local_broker"))


def _fresh_topic_name(request) -> str:
    return f"t{next(_topic_ids)}_{request.node.name[:40]}".replace("[", "_").replace("]", "_")


@pytest.fixture
def topic(broker, request):
    """A fresh topic name per test (the broker is shared by the session)."""
    return _fresh_topic_name(request)


# The SCRAM-SHA-512 users of the session's Apache Kafka (its ``admin`` user is a super user).
KAFKA_USERS = {"trainer": "trainer-secret", "server": "server-secret", "nobody": "nobody-secret"}


@pytest.fixture(scope="session")
def apache_kafka(tmp_path_factory):
    """One Apache Kafka broker (KRaft, 256 MB heap) for the session: PLAINTEXT (open) and SASL_SSL with
    SCRAM-SHA-512 and ACLs (``KAFKA_USERS``; each test grants what it needs on its own topics)."""
    with ApacheKafka(1, users=KAFKA_USERS, acls=True, work_dir=str(tmp_path_factory.mktemp("apache_kafka"))) as k:
        _SESSION_KAFKA["kafka"] = k
        yield k


@pytest.fixture
def kafka_topic(apache_kafka, request):
    """A fresh topic name per test on the session's Apache Kafka (created by the test)."""
    return _fresh_topic_name(request)


# The synthetic stream's label depends on C1..C12 and the 13 numbers only (SyntheticCtrStream's
# ``informative=12``): C13..C26 are noise. Each of their 14 tables costs every trainer start, export and
# serve about 0.3 s of CPU (tracing, the optimizer's slots, the first step's graph optimisation) and tests
# nothing the 12 do not, so tests train the 12 (they still read all 40 columns). The shipped sample's 26
# run in the CLI tests that load samples/online.config itself, the demo, the docs' example and the benchmarks.
TEST_TABLES = 12


@contextlib.contextmanager
def leaves_no_kafka_client():
    """Asserts that the block closed every kafka-python client it opened (each runs an IO thread named
    ``kafka-io-<client id>`` until closed). One left open retries its broker for ever, and logs each failure
    wherever the process is by then (CI once failed a later test on a client an earlier test left behind)."""
    before = set(threading.enumerate())
    yield
    left = [t.name for t in threading.enumerate() if t not in before and t.name.startswith("kafka-io-")]
    assert not left, f"kafka-python clients left open: {left}"


def online_config(model_dir, server: str = "", topic: str = "", full_sample: bool = False, **edits):
    """samples/online.config pointed at a test broker/topic, without its update and eval topics, with JSON-path edits;
    its first TEST_TABLES categorical features (all of them with ``full_sample``)."""
    config = load_pipeline_config(os.path.join(SAMPLES, "online.config"))
    if not full_sample:
        kept = [f for f in config.feature_configs
                if f.feature_type != f.IdFeature or int(f.input_names[0][1:]) <= TEST_TABLES]
        del config.feature_configs[:]
        config.feature_configs.extend(kept)
    config.model_dir = str(model_dir)
    config.train_config.ClearField("incr_save_config")  # tests that publish say where
    config.ClearField("kafka_eval_input")  # tests that evaluate say what on
    if server:
        config.kafka_train_input.server = server
        config.kafka_train_input.topic = topic
    from easyonline.config import apply_edit_config_json  # pylint: disable=g-import-not-at-top
    if edits:
        apply_edit_config_json(config, edits)
    return config


def sorted_rows(variable):
    """A TFRA table's (keys, values) as numpy, ordered by key (an export's order is the hash table's)."""
    import numpy as np  # why: conftest loads before every test; numpy only where a table is read
    keys, values = variable.export()
    order = np.argsort(keys.numpy())
    return keys.numpy()[order], values.numpy()[order]


def python_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


PYTHON = sys.executable
