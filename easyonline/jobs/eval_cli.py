"""``python -m easyonline.eval --config X``: evaluates each new checkpoint of model_dir as the trainer writes it.

Prints one JSON line per checkpoint (also appended to <eval_dir>/results.jsonl,
and written to TensorBoard in eval_dir as eval_auc, eval_logloss, eval_ctr).
"""
from absl import flags

from easyonline.core.exit_codes import run_job
from easyonline.jobs.config_flags import define_config_flags
from easyonline.utils.cli import run_command
from easyonline.utils.logs import setup_logging


def define_flags() -> None:
    define_config_flags("Pipeline config (protobuf text); model_dir/pipeline.config works. Its kafka_eval_input "
                        "(or file_eval_input) is what each checkpoint is scored on.",
                        "Overrides model_dir of the config: the directory whose checkpoints are evaluated.")
    flags.DEFINE_string("eval_dir", "", "Where results.jsonl and the TensorBoard events go "
                        "(default: <model_dir>/eval; for an oss:// model_dir, a local cache directory).")
    flags.DEFINE_string("checkpoint_path", "", "Evaluate this checkpoint (a prefix, or a directory's latest) "
                        "once and exit, instead of following model_dir.")
    flags.DEFINE_bool("once", False, "Evaluate the latest checkpoint of model_dir once and exit.")
    flags.DEFINE_integer("max_eval_samples", 0, "Score at most this many samples per checkpoint (0: the "
                         "config's eval_config.num_examples; both 0: the whole eval input, for Kafka up to where "
                         "the topic stands when the evaluation starts).")
    flags.DEFINE_float("poll_secs", 5.0, "How often to look for new checkpoints.")
    flags.DEFINE_integer("max_evaluations", 0, "Exit after this many evaluations (0: no limit).")
    flags.DEFINE_float("idle_timeout_secs", 0.0, "Exit when no new checkpoint appeared for this long (0: never).")
    flags.DEFINE_integer("metrics_port", 0, "Serve the latest evaluation's figures for Prometheus on "
                         "http://<metrics_host>:<port>/metrics (0: off). See docs/evaluation.md.")
    flags.DEFINE_string("metrics_host", "127.0.0.1", "Address --metrics_port listens on (0.0.0.0: every interface).")
    flags.DEFINE_float("stop_grace_secs", 30.0, "Once the trainer's stop file is in model_dir, exit after this "
                       "long without a new checkpoint (the trainer's final save comes after the file).")


def main(argv) -> int:
    del argv
    setup_logging(flags.FLAGS.log_level)
    return run_job(_evaluate)


def _evaluate() -> int:
    # why: --help and a bad flag answer without importing TensorFlow (~5 s of CPU)
    from easyonline.jobs.eval_job import evaluate  # pylint: disable=g-import-not-at-top
    return evaluate(flags.FLAGS)


def run() -> None:
    run_command(define_flags, main)
