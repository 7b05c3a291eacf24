"""``python -m easyonline.serve --export_dir D --port P``: the serving processor.

Loads the newest version in ``export_dir``, follows the update stream from
the position the export recorded (unless ``--follow_updates=false``: then
updates arrive through the update signatures over gRPC, grpc_api.py), and
answers HTTP on 127.0.0.1 (see http_api.py). Stops on SIGTERM or Ctrl-C.
"""
import logging
import signal
import sys
import threading

from absl import flags

from easyonline.config.kafka_settings import consumer_settings_from_flags
from easyonline.core.errors import ConfigError
from easyonline.serve.grpc_api import start_grpc_server
from easyonline.serve.http_api import ServingState, make_server
from easyonline.serve.loaded_export import LoadedExport
from easyonline.serve.status_log import broker_outage, status_line
from easyonline.serve.tls import tls_from_flags
from easyonline.serve.update_follower import UpdateFollower
from easyonline.updates.signing import UpdateVerifier, server_secret
from easyonline.utils.cli import run_command
from easyonline.utils.logs import setup_logging

log = logging.getLogger("easyonline.serve")


def define_flags() -> None:
    flags.DEFINE_string("export_dir", None, "Directory of exported versions (or one version); the newest is served.")
    flags.DEFINE_integer("port", 8501, "HTTP port; 0 picks a free one (printed at start).")
    flags.DEFINE_string("host", "127.0.0.1", "Address to bind; loopback unless you mean otherwise.")
    flags.DEFINE_integer("grpc_port", -1, "Also answer TF Serving's gRPC PredictionService (Predict, "
                         "GetModelMetadata; Predict runs serving_default, and the update signatures with "
                         "--follow_updates=false) on this port of --host (TF Serving uses 8500); 0 picks a free one "
                         "(printed at start), -1: off.")
    flags.DEFINE_boolean("follow_updates", True, "Follow the update stream the export names (its "
                         "incr_update.txt). false: do not read it; the update signatures (incr_update_message_sig, "
                         "incr_update_sig) over gRPC are then the only writer, as with stock TF Serving fed by "
                         "python -m easyonline.tools.tfserving_follower (needs --grpc_port). While true, gRPC "
                         "update requests are refused (FAILED_PRECONDITION): two writers would interleave.")
    flags.DEFINE_string("model_name", "", "Name in the URLs; default: the export's model name.")
    flags.DEFINE_integer("max_request_bytes", 16 * 1024 * 1024, "Larger predict requests get HTTP 413 (gRPC: "
                         "RESOURCE_EXHAUSTED, its receive limit).")
    flags.DEFINE_integer("max_rows_per_request", 10000, "Predict requests with more rows get HTTP 413 (gRPC: "
                         "RESOURCE_EXHAUSTED); also the most values one input may declare (a gRPC tensor's shape), "
                         "checked before any tensor is built (more: HTTP 400 / INVALID_ARGUMENT).")
    flags.DEFINE_float("idle_timeout_secs", 30.0, "A connection idle (or stalled mid-request) this long is closed.")
    flags.DEFINE_integer("max_connections", 1024, "Open connections at most (one thread each); more get HTTP 503.")
    flags.DEFINE_float("status_secs", 10.0, "Seconds between status lines in the log (and, while the update broker "
                       "is unreachable, one line saying so).")
    define_update_kafka_config_flag()
    flags.DEFINE_string("update_secret_file", "", "A file holding the trainer's update signing secret "
                        "(train_config.incr_save_config.signing_secret). With it, only updates whose MAC that secret "
                        "made are applied, from the stream and over gRPC. Default: the config's ${NAME}, when it "
                        "names a variable set here. A server of a trainer that signs refuses to start without it.")
    flags.DEFINE_boolean("allow_unsigned_updates", False, "With --follow_updates=false and no secret, apply updates "
                         "over gRPC from any caller. Only where nobody but the feeder reaches the gRPC port.")
    flags.DEFINE_string("tls_cert_file", "", "PEM certificate: serve HTTPS and gRPC over TLS (with --tls_key_file).")
    flags.DEFINE_string("tls_key_file", "", "PEM private key of --tls_cert_file.")
    flags.DEFINE_string("tls_client_ca_file", "", "PEM CA: with TLS on, every client must present a certificate "
                        "this CA signed (mutual TLS), on the REST and the gRPC port.")
    flags.DEFINE_string("log_level", "INFO", "Python log level: DEBUG, INFO, WARNING, ERROR.")


def define_update_kafka_config_flag() -> None:
    """``--kafka_config`` of a reader of an export's update stream (serve, tools.tfserving_follower)."""
    flags.DEFINE_multi_string("kafka_config", [], "key=value, repeatable: a kafka-python consumer setting for "
                              "reading a Kafka update stream, e.g. sasl_plain_password=${KAFKA_PASSWORD} (a "
                              "${NAME} value is read from the environment). SASL/SSL settings of the export's "
                              "pipeline.config are used already; give the ones its export redacted.")


def main(argv) -> int:
    del argv
    FLAGS = flags.FLAGS
    setup_logging(FLAGS.log_level)
    if not FLAGS.export_dir:
        print("error: --export_dir is required", file=sys.stderr)
        return 2
    if FLAGS.max_connections < 1 or FLAGS.idle_timeout_secs <= 0 or FLAGS.max_rows_per_request < 1:
        print("error: --max_connections, --idle_timeout_secs and --max_rows_per_request must be positive",
              file=sys.stderr)
        return 2
    try:
        kafka_settings = consumer_settings_from_flags(FLAGS.kafka_config, "--kafka_config")
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        export = LoadedExport(FLAGS.export_dir)
    except (FileNotFoundError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    try:
        tls = tls_from_flags(FLAGS.tls_cert_file, FLAGS.tls_key_file, FLAGS.tls_client_ca_file)
        secret = server_secret(export.config.train_config.incr_save_config, FLAGS.update_secret_file)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    verifier = UpdateVerifier(secret) if secret else None
    if verifier is not None:
        log.info("updates are applied only when signed with the trainer's secret")
    name = FLAGS.model_name or export.update_info.get("model_name") or "model"
    follower = UpdateFollower(export, kafka_settings=kafka_settings, verifier=verifier)
    stopped = threading.Event()
    follower.on_fatal = stopped.set  # Kafka refused the reader: exits with the error's code (7)
    if FLAGS.follow_updates:
        follower.start()
    else:
        log.info("not following the update stream (--follow_updates=false): updates arrive over gRPC only")
    state = ServingState(export, follower, name, FLAGS.max_request_bytes, FLAGS.max_rows_per_request,
                         follows_updates=FLAGS.follow_updates, verifier=verifier,
                         allow_unsigned_updates=FLAGS.allow_unsigned_updates)
    server = make_server(state, FLAGS.host, FLAGS.port, FLAGS.idle_timeout_secs, FLAGS.max_connections,
                         tls.ssl_context() if tls else None)
    grpc_server = None
    if FLAGS.grpc_port >= 0:
        try:
            grpc_server, grpc_port = start_grpc_server(state, FLAGS.host, FLAGS.grpc_port,
                                                       credentials=tls.grpc_credentials() if tls else None)
        except (OSError, RuntimeError) as e:
            print(f"error: --grpc_port {FLAGS.grpc_port}: {e}", file=sys.stderr)
            return 2
        print(f"serving {name} version {export.version} over gRPC on {FLAGS.host}:{grpc_port}", flush=True)

    def stop(*_):
        stopped.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # Printed before answering (the socket already listens): whoever sees an answer can read this line.
    scheme = "https" if tls else "http"
    print(f"serving {name} version {export.version} on {scheme}://{FLAGS.host}:{server.server_address[1]}", flush=True)
    thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    thread.start()
    while not stopped.wait(FLAGS.status_secs):
        outage = broker_outage(follower)
        if outage is not None:  # kafka-python's own connection errors are folded into this one line
            log.warning("%s; serving the parameters of step %s", outage, follower.step)
        log.info("%s", status_line(state.status(), state.requests, outage))
    follower.stop()
    if follower.fatal is not None:
        server.shutdown()
    if grpc_server is not None:
        grpc_server.stop(grace=2).wait(5)
    thread.join(5)
    server.server_close()
    if follower.fatal is not None:
        print(f"error: {follower.fatal}", file=sys.stderr)
        return follower.fatal.exit_code
    return 0


def run() -> None:
    run_command(define_flags, main)
