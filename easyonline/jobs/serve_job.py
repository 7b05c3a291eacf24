"""What ``python -m easyonline.serve`` does once its flags are parsed (jobs/serve_cli.py): loads the newest export,
follows its update stream, answers REST (and gRPC) until SIGTERM or Ctrl-C."""
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

log = logging.getLogger("easyonline.serve")


def serve(FLAGS: flags.FlagValues) -> int:  # pylint: disable=invalid-name
    """Serves until stopped; returns the exit code (2: a bad flag, 3: no export, 7: Kafka refused the reader)."""
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
