"""``python -m easyonline.export --config X --export_dir D``: a SavedModel for serving.

``--export_dir`` and ``--embedding_export_dir`` may be ``oss://bucket/path``.
``--for_stock_serving``: an export in TensorFlow core ops only, for stock TensorFlow Serving.
"""
import sys

from absl import flags

from easyonline.core.exit_codes import run_job
from easyonline.jobs.config_flags import define_config_flags
from easyonline.utils.cli import run_command
from easyonline.utils.logs import setup_logging


def define_flags() -> None:
    define_config_flags("Pipeline config (protobuf text); model_dir/pipeline.config works.",
                        "Overrides model_dir of the config (where the parameter id maps are).")
    flags.DEFINE_string("export_dir", None, "Directory of versions: the export is written to <export_dir>/<unix time>.")
    flags.DEFINE_string("checkpoint_path", "", "A checkpoint prefix or a directory (its latest); default: the "
                        "latest checkpoint in model_dir.")
    flags.DEFINE_string("embedding_export_dir", "", "Also write every embedding table's keys and vectors here "
                        "(<table>/part-*.tsv, manifest.json, DONE), for external vector stores.")
    flags.DEFINE_bool("for_stock_serving", False, "Write a SavedModel that uses TensorFlow's core ops only: "
                      "each embedding table becomes a core hash table (MutableHashTable), so stock TensorFlow "
                      "Serving (tensorflow/serving, tensorflow_model_server) loads it without "
                      "tensorflow_recommenders_addons; its signatures (serving_default, incr_update_sig, "
                      "incr_update_message_sig) are the same. See docs/serving.md, 'Stock TensorFlow Serving'.")
    flags.DEFINE_enum("update_signatures", "", ["", "signed", "unsigned", "none"], "The update signatures "
                      "(incr_update_sig, incr_update_message_sig) the export carries. signed: they apply an update only "
                      "if its MAC was made with train_config.incr_save_config.signing_secret (checked in the graph, "
                      "so stock TF Serving checks it too); none: prediction only (serving_default alone); unsigned: "
                      "they apply whatever a caller of the server's ports sends (only where nobody else reaches "
                      "them). Default: signed when the config has a signing secret, else none. See docs/serving.md, "
                      "'Who may write to a served model'.")


def main(argv) -> int:
    del argv
    setup_logging(flags.FLAGS.log_level)
    if not flags.FLAGS.export_dir:
        print("error: --export_dir is required", file=sys.stderr)
        return 2
    return run_job(_export)


def _export() -> int:
    # why: --help and a bad flag answer without importing TensorFlow (~5 s of CPU)
    from easyonline.jobs.export_job import export  # pylint: disable=g-import-not-at-top
    return export(flags.FLAGS)


def run() -> None:
    run_command(define_flags, main)
