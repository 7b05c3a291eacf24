"""SASL_SSL (SCRAM-SHA-512) with the broker's certificate verified, and ACLs, against real Apache Kafka.

The broker is Apache Kafka itself (``easyonline/tools/apache_kafka.py``, the session's ``apache_kafka``:
KRaft, a CA made per run, a certificate for 127.0.0.1, the StandardAuthorizer with no ACL but those a test
grants). Each role runs with the least ACLs it needs (docs/operations.md, "ACLs each role needs"):

- the trainer (user ``trainer``: READ on its input topic and group, WRITE and DESCRIBE on the update topic)
  trains with either data client, publishes, and commits its positions where Kafka's own consumer-group
  tool shows them with their lag; the eval job reads the same topic;
- servers (user ``server``: READ on the update topic) follow the stream (``serve``, the replica the
  publisher's stream rebuilds, ``tools.tfserving_follower``) and end equal to the trainer;
- a wrong password, a CA that did not sign the broker's certificate and a missing ACL each end the job
  with one error naming the cause and exit code 7, within a bounded time (no retry for ever).

``samples/online_sasl_ssl.config`` is the config every trainer here loads (its brokers, CA and topics
replaced by the test's).
"""
import os
import threading
import time

import numpy as np
import pytest

from easyonline.config import load_pipeline_config
from easyonline.core.errors import ACCESS_DENIED, KafkaAccessError
from easyonline.eval.evaluator import Evaluator
from easyonline.inputs.reader_process import KafkaReaderProcess
from easyonline.jobs.online_train import build_trainer
from easyonline.publish.publish_callback import IncrementalPublish
from easyonline.tools.stream_producer import SyntheticCtrStream, produce
from easyonline.tools.tls_certs import make_ca
from easyonline.updates.readers import KafkaUpdateReader
from easyonline.updates.replica import replay
from easyonline.utils import preloaded_python
from tests.conftest import PYTHON, SAMPLES, TEST_TABLES, python_env
from tests.integration.test_incremental_updates import assert_replica_equals_trainer

FAST = {"data_config.batch_size": 250, "data_config.batch_timeout_ms": 200, "train_config.log_step_count_secs": 2,
        "train_config.save_checkpoints_secs": 0}
SECURITY_KEYS = ("security_protocol", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password", "ssl_cafile")


def sasl_config(model_dir, kafka, topic, updates="", client="CONFLUENT_KAFKA", user="trainer", cafile=None,
                **edits):
    """samples/online_sasl_ssl.config pointed at the session's broker (its SASL_SSL listener, its CA), reading
    ``topic`` as ``user`` (password from KAFKA_PASSWORD, as the sample has it) and publishing to ``updates``
    (none when empty); its first TEST_TABLES categorical features."""
    from easyonline.config import apply_edit_config_json  # pylint: disable=g-import-not-at-top
    config = load_pipeline_config(os.path.join(SAMPLES, "online_sasl_ssl.config"))
    kept = [f for f in config.feature_configs
            if f.feature_type != f.IdFeature or int(f.input_names[0][1:]) <= TEST_TABLES]
    del config.feature_configs[:]
    config.feature_configs.extend(kept)
    config.model_dir = str(model_dir)
    train = config.kafka_train_input
    assert train.config["sasl_plain_password"] == "${KAFKA_PASSWORD}"  # the sample's secret is a reference
    train.server, train.topic, train.group = kafka.sasl_bootstrap, topic, "g_" + topic
    train.client = getattr(train, client)
    train.config["sasl_plain_username"] = user
    train.config["ssl_cafile"] = cafile or kafka.ca_file
    incr = config.train_config.incr_save_config
    if updates:
        incr.kafka.server, incr.kafka.topic = kafka.sasl_bootstrap, updates
        incr.kafka.config["sasl_plain_username"] = user
        incr.kafka.config["ssl_cafile"] = cafile or kafka.ca_file
    else:
        config.train_config.ClearField("incr_save_config")
    apply_edit_config_json(config, {**FAST, **edits})
    return config


def grant_trainer(kafka, topic, updates):
    """The trainer's least ACLs: READ its input topic and group; WRITE and DESCRIBE its update topic."""
    kafka.allow("trainer", "TOPIC", topic, ["READ"])
    kafka.allow("trainer", "GROUP", "g_" + topic, ["READ"])
    if updates:
        kafka.allow("trainer", "TOPIC", updates, ["WRITE", "DESCRIBE"])


@pytest.fixture
def kafka_password(monkeypatch):
    monkeypatch.setenv("KAFKA_PASSWORD", "trainer-secret")


def _group_rows(kafka, group):
    """Kafka's consumer-group tool's --describe rows of ``group``: {partition: (current offset, log end, lag)}."""
    out = kafka.run_tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server",
                         kafka.bootstrap, "--describe", "--group", group)
    rows = {}
    for line in out.splitlines():
        cells = line.split()
        if len(cells) >= 6 and cells[0] == group:
            rows[int(cells[2])] = tuple(int(c) if c.isdigit() else c for c in cells[3:6])
    return out, rows


def test_trains_publishes_and_evaluates_over_sasl_ssl_with_the_least_acls(apache_kafka, kafka_topic, tmp_path,
                                                                         kafka_password):
    topic, updates = kafka_topic, kafka_topic + "_updates"
    apache_kafka.create_topic(topic, 2)
    apache_kafka.create_topic(updates, 1)  # created beforehand: the trainer may not CREATE
    produce(apache_kafka.bootstrap, topic, SyntheticCtrStream().chunks(0, 1500), partitions=2)
    grant_trainer(apache_kafka, topic, updates)
    apache_kafka.allow("server", "TOPIC", updates, ["READ"])
    config = sasl_config(tmp_path / "model", apache_kafka, topic, updates, client="CONFLUENT_KAFKA", **{
        "train_config.incr_save_config.sparse_save_steps": 2, "train_config.incr_save_config.dense_save_steps": 3})
    config.kafka_eval_input.CopyFrom(config.kafka_train_input)
    config.kafka_eval_input.client = config.kafka_eval_input.KAFKA_PYTHON
    config.kafka_eval_input.ClearField("group")

    trainer = build_trainer(config, online=False)  # the config's own input: the reader process, librdkafka
    summary = trainer.run()
    assert summary.samples == 1500 and summary.positions == {0: 750, 1: 750}
    publish = next(c for c in trainer.callbacks if isinstance(c, IncrementalPublish))
    assert publish.publisher.last_acked.last_sequence > 1

    # a server principal that may only READ the update topic rebuilds the trainer's parameters exactly
    reader = KafkaUpdateReader(apache_kafka.sasl_bootstrap, updates, extra=apache_kafka.kafka_python_security("server"))
    records = reader.read_available()
    reader.close()
    model_name = config.train_config.incr_save_config.model_name  # the sample names its model
    assert_replica_equals_trainer(replay(records, model_name), trainer, tmp_path / "model")

    # the eval job reads the same topic as the trainer's user, with kafka-python
    evaluator = Evaluator(config, str(tmp_path / "eval"))
    result = evaluator.evaluate(summary.checkpoint)
    evaluator.close()
    assert result.samples == 1500

    # Kafka's own consumer-group tool lists the group (the trainer assigns partitions itself: no member) with the
    # trainer's positions as its committed offsets and lag 0; after more samples, the lag is what is unread
    out, rows = _group_rows(apache_kafka, "g_" + topic)
    assert rows == {0: (750, 750, 0), 1: (750, 750, 0)}, out
    produce(apache_kafka.bootstrap, topic, SyntheticCtrStream().chunks(1500, 100), partitions=2)
    out, rows = _group_rows(apache_kafka, "g_" + topic)
    assert {p: r[0] for p, r in rows.items()} == {0: 750, 1: 750}, out
    assert sum(r[2] for r in rows.values()) == 100 and all(r[1] == r[0] + r[2] for r in rows.values()), out


def _refused_case(kafka, case, tmp_path):
    """(user, password, CA file, the error's expected words) of one refusal."""
    if case == "wrong_password":
        return "trainer", "not-the-password", kafka.ca_file, [
            "refused user 'trainer': authentication failed (SASL mechanism SCRAM-SHA-512)",
            "kafka_train_input.config[sasl_plain_password]"]
    if case == "unknown_ca":
        other = make_ca(str(tmp_path / "other_ca"), "a CA that signed nothing")
        return "trainer", "trainer-secret", other, [
            "certificate verify failed", f"kafka_train_input.config[ssl_cafile] ({other})"]
    if case == "no_acl":
        return "nobody", "nobody-secret", kafka.ca_file, ["User:nobody may not DESCRIBE topic", "kafka_train_input.topic"]
    return "nobody", "nobody-secret", kafka.ca_file, ["User:nobody may not READ topic"]  # describe_only


# Each refusal with both clients; CI runs each refusal once (the two ~12 s logins it skips are the same wording
# path with the other client: the train CLI's test below refuses a wrong password with librdkafka, the default).
_SLOW = pytest.mark.scenario


@pytest.mark.parametrize("case,client", [
    ("wrong_password", "KAFKA_PYTHON"), pytest.param("wrong_password", "CONFLUENT_KAFKA", marks=_SLOW),
    ("unknown_ca", "CONFLUENT_KAFKA"), pytest.param("unknown_ca", "KAFKA_PYTHON", marks=_SLOW),
    ("no_acl", "KAFKA_PYTHON"), ("no_acl", "CONFLUENT_KAFKA"),
    ("describe_only", "KAFKA_PYTHON"), ("describe_only", "CONFLUENT_KAFKA")])
def test_a_refused_trainer_stops_with_one_error_naming_the_cause(apache_kafka, kafka_topic, tmp_path, monkeypatch,
                                                                 case, client):
    apache_kafka.create_topic(kafka_topic, 1)
    produce(apache_kafka.bootstrap, kafka_topic, SyntheticCtrStream().chunks(0, 50), partitions=1)
    grant_trainer(apache_kafka, kafka_topic, "")
    if case == "describe_only":  # it may see the topic, not read it
        apache_kafka.allow("nobody", "TOPIC", kafka_topic, ["DESCRIBE"])
        apache_kafka.allow("nobody", "GROUP", "g_" + kafka_topic, ["READ"])
    user, password, cafile, words = _refused_case(apache_kafka, case, tmp_path)
    monkeypatch.setenv("KAFKA_PASSWORD", password)
    config = sasl_config(tmp_path / "model", apache_kafka, kafka_topic, client=client, user=user, cafile=cafile)
    started = time.time()
    with pytest.raises(KafkaAccessError) as e:
        reader = KafkaReaderProcess(config.kafka_train_input, 250, 200)  # the trainer's reader
        try:
            deadline = time.time() + 60
            while time.time() < deadline:
                reader.next_batch(0.5)
        finally:
            reader.close()
    took = time.time() - started
    assert all(word in str(e.value) for word in words), str(e.value)
    assert e.value.exit_code == ACCESS_DENIED == 7
    assert took < 30, took  # kafka-python's bootstrap timeout (10 s) at most: no retry for ever


def test_the_train_command_exits_7_naming_user_and_mechanism(apache_kafka, kafka_topic, tmp_path):
    from google.protobuf import text_format  # pylint: disable=g-import-not-at-top
    apache_kafka.create_topic(kafka_topic, 1)
    config = sasl_config(tmp_path / "model", apache_kafka, kafka_topic, client="KAFKA_PYTHON")
    path = tmp_path / "sasl.config"
    path.write_text(text_format.MessageToString(config))
    started = time.time()
    done = preloaded_python.run([PYTHON, "-m", "easyonline.train", f"--config={path}"], capture_output=True, text=True,
                          env={**python_env(), "KAFKA_PASSWORD": "wrong"}, timeout=120)
    took = time.time() - started
    assert done.returncode == 7, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    # What the broker said, or (kafka-python's TLS transport loses that answer in about 1 of 12 refused logins,
    # utils/kafka_access.py) that it closed every connection during authentication: the same error either way
    said = ("Authentication failed during authentication due to invalid credentials with SASL mechanism "
            "SCRAM-SHA-512", "it closed every connection during authentication")
    assert errors in ([f"error: Kafka at {apache_kafka.sasl_bootstrap} refused user 'trainer': authentication failed "
                       "(SASL mechanism SCRAM-SHA-512); check kafka_train_input.config[sasl_plain_username] and "
                       f"kafka_train_input.config[sasl_plain_password] (the broker said: {cause})"]
                      for cause in said), errors
    assert "wrong" not in done.stderr.replace("'wrong'", "")  # the password is never printed
    assert took < 60, took


class _ExportInfo:
    """What UpdateFollower reads of an export (serve's LoadedExport, tfserving_follower's target): where its
    update stream starts. Its config has no update section, so the reader's settings are the flags' alone."""

    def __init__(self, server, topic):
        from easyonline.protos import pipeline_pb2  # pylint: disable=g-import-not-at-top
        self.update_info = {"storage": "kafka", "server": server, "topic": topic, "offset": 0, "model_name": "m",
                            "sequence": 1}
        self.config = pipeline_pb2.PipelineConfig()


@pytest.mark.parametrize("user, password, words", [
    ("server", "wrong", ["refused user 'server': authentication failed (SASL mechanism SCRAM-SHA-512)",
                         "--kafka_config sasl_plain_password=..."]),
    ("nobody", None, ["User:nobody may not READ topic"]),
])
def test_a_refused_update_follower_stops_with_one_error(apache_kafka, kafka_topic, user, password, words):
    """serve's and tools.tfserving_follower's update reader (UpdateFollower; both commands exit with the error's
    code once it stops: serve_cli / tfserving_follower main)."""
    from easyonline.serve.update_follower import UpdateFollower  # pylint: disable=g-import-not-at-top
    apache_kafka.create_topic(kafka_topic, 1)
    apache_kafka.allow("server", "TOPIC", kafka_topic, ["READ"])
    follower = UpdateFollower(_ExportInfo(apache_kafka.sasl_bootstrap, kafka_topic),  # type: ignore[arg-type]
                              kafka_settings=apache_kafka.kafka_python_security(user, password))
    stopped = threading.Event()
    follower.on_fatal = stopped.set
    started = time.time()
    follower.start()
    try:
        assert stopped.wait(45), follower.error
    finally:
        follower.stop()
    assert time.time() - started < 45
    assert all(word in str(follower.fatal) for word in words), str(follower.fatal)
    assert follower.fatal.exit_code == 7 and not follower._thread.is_alive()  # pylint: disable=protected-access


def test_serve_and_the_tfserving_follower_follow_the_stream_over_sasl_ssl_and_end_equal_to_the_trainer(
        apache_kafka, kafka_topic, tmp_path, kafka_password, monkeypatch):
    """The trainer reads with kafka-python this time; the export's pipeline.config has the trainer's user and a
    redacted password: ``serve`` and ``tools.tfserving_follower`` log in as the server user through
    --kafka_config (password from the environment); both served models end equal to the trainer."""
    from tests.integration.test_export_serve import Server, _wait, export, instances, trainer_probs  # noqa: PLC0415
    from tests.integration.test_tfserving_follower import _acked_sequence, _follower, _stop  # noqa: PLC0415
    from easyonline.utils.net import free_port  # noqa: PLC0415
    topic, updates = kafka_topic, kafka_topic + "_updates"
    apache_kafka.create_topic(topic, 1)
    apache_kafka.create_topic(updates, 1)
    grant_trainer(apache_kafka, topic, updates)
    apache_kafka.allow("server", "TOPIC", updates, ["READ"])
    stream = SyntheticCtrStream()
    produce(apache_kafka.bootstrap, topic, stream.chunks(0, 1000), partitions=1)
    # the trainer also signs its updates (production's setting): both servers verify them with the secret from
    # their environment, the TF Serving-like one inside the export's update signature as well
    monkeypatch.setenv("UPDATE_SECRET", "secret shared by trainer and servers")
    config = sasl_config(tmp_path / "m", apache_kafka, topic, updates, client="KAFKA_PYTHON", **{
        "train_config.incr_save_config.sparse_save_steps": 1, "train_config.incr_save_config.dense_save_steps": 1,
        "train_config.incr_save_config.signing_secret": "${UPDATE_SECRET}", "train_config.save_checkpoints_steps": 2})
    trainer = build_trainer(config, online=False)  # 4 steps, a checkpoint at step 2
    assert trainer.run().samples == 1000 and trainer.step == 4
    # the export of step 2 (one trainer run, not a run and a restart: a model build less): the export job (with
    # the trainer's config, so its user) looks up where the stream after the checkpoint's step starts, mid-stream
    # (steps 3-4 follow it): it needs READ on the update topic (refused without it: KafkaAccessError, exit code 7)
    apache_kafka.allow("trainer", "TOPIC", updates, ["READ"])
    export(tmp_path / "m", tmp_path / "export", f"--checkpoint_path={tmp_path / 'm' / 'model.ckpt-2'}")
    last = next(c for c in trainer.callbacks if isinstance(c, IncrementalPublish)).publisher.last_acked.last_sequence
    lines = list(stream.lines(50000, 20))
    monkeypatch.setenv("SERVER_PASSWORD", "server-secret")  # (the server's environment: Server copies os.environ)
    server = Server(tmp_path / "export", tmp_path / "serve.log", "--model_name=m", "--kafka_config=sasl_plain_username=server",
                    "--kafka_config=sasl_plain_password=${SERVER_PASSWORD}",
                    f"--kafka_config=ssl_cafile={apache_kafka.ca_file}")
    # beside it, a server as stock TF Serving runs (it does not read the stream) fed by tools.tfserving_follower,
    # which logs in as the server user through its own --kafka_config
    grpc_port = free_port()
    fed = Server(tmp_path / "export", tmp_path / "fed.log", f"--grpc_port={grpc_port}", "--follow_updates=false",
                 "--model_name=m")  # (the sample names its model online_sasl_ssl; the helpers say m)
    follower_log = tmp_path / "follower.log"
    follower = _follower(tmp_path / "export", grpc_port, follower_log, "--kafka_config=sasl_plain_username=server",
                         "--kafka_config=sasl_plain_password=${SERVER_PASSWORD}",
                         f"--kafka_config=ssl_cafile={apache_kafka.ca_file}")
    try:
        status = server.wait_for(lambda s: s["last_applied_sequence"] == last and s["update_lag_messages"] == 0)
        assert status["refused_updates"] == {} and status["applied_updates"] > 0
        expected = trainer_probs(trainer, lines)
        np.testing.assert_allclose(server.predict(instances(lines)), expected, atol=1e-5)
        assert _wait(lambda: _acked_sequence(follower_log) == last, 90), follower_log.read_text()[-3000:]
        np.testing.assert_allclose(fed.predict(instances(lines)), expected, atol=1e-5)
        assert fed.status()["applied_updates"] > 0
    finally:
        assert _stop(follower) == 0, follower_log.read_text()[-3000:]
        assert fed.stop() == 0
        assert server.stop() == 0
