"""``python -m easyonline.serve --export_dir D --port P``: the serving processor.

Loads the newest version in ``export_dir``, follows the update stream from
the position the export recorded (unless ``--follow_updates=false``: then
updates arrive through the update signatures over gRPC, grpc_api.py), and
answers HTTP on 127.0.0.1 (see http_api.py). Stops on SIGTERM or Ctrl-C.
"""
import sys

from absl import flags

from easyonline.utils.cli import run_command
from easyonline.utils.logs import setup_logging


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
    # why: --help and a bad flag answer without importing TensorFlow (~5 s of CPU)
    from easyonline.jobs.serve_job import serve  # pylint: disable=g-import-not-at-top
    return serve(FLAGS)


def run() -> None:
    run_command(define_flags, main)
