"""The names of the files in an export version, and the layout of its packed serving input: what the exporter
writes and serving reads.

Kept apart from the exporter so that serving can find its files without
importing models, embeddings or the trainer.
"""
import os
from typing import Any, Dict, List, Mapping

SAVED_MODEL_FILE = "saved_model.pb"  # a version is complete once it has this
ASSETS_DIR = "assets"
INCR_UPDATE_FILE = "incr_update.txt"  # JSON: the update stream and where this export starts in it
# incr_update.txt's key saying the export uses TensorFlow core ops only (no TFRA); absent in older exports: false
STOCK_SERVING_KEY = "for_stock_serving"
DENSE_SHAPES_FILE = "dense_shapes.json"  # JSON: dense parameter id -> shape (update messages are checked against it)
PREDICTIONS_FILE = "predictions.json"  # JSON list: each task's prediction output name, the primary task's first
PIPELINE_FILE = "pipeline.config"  # the config the model was trained with (secrets redacted)
SERVING_SIGNATURE = "serving_default"
UPDATE_SIGNATURE = "incr_update_sig"
UPDATE_MESSAGE_SIGNATURE = "incr_update_message_sig"  # the same, from serialized update messages
# Which update signatures an export carries (export --update_signatures; incr_update.txt records it):
SIGNED, UNSIGNED, NO_UPDATES = "signed", "unsigned", "none"
UPDATE_SIGNATURES_KEY = "update_signatures"
PACKED_SERVE_FUNCTION = "serve_packed"  # the module's function taking the raw inputs packed (exports since 2026-11-29)


def packed_inputs(inputs: Mapping[str, Any]) -> Dict[str, List[str]]:
    """{dtype name: its inputs' names, sorted}, from {input name: tf.DType}: ``serve_packed`` takes one
    [inputs, rows] tensor per dtype, row i of it the input named i-th here. A batch-1 request then makes three
    tensors instead of one per input (39 in DeepFM on Criteo's fields, ~40 us each: most of its time)."""
    out: Dict[str, List[str]] = {}
    for name in sorted(inputs):
        out.setdefault(inputs[name].name, []).append(name)
    return dict(sorted(out.items()))


def newest_version(export_dir: str) -> str:
    """The highest numbered version directory in ``export_dir`` (or ``export_dir`` itself if it is one)."""
    if os.path.exists(os.path.join(export_dir, SAVED_MODEL_FILE)):
        return export_dir
    versions = [name for name in os.listdir(export_dir) if name.isdigit()
                and os.path.exists(os.path.join(export_dir, name, SAVED_MODEL_FILE))]
    if not versions:
        raise FileNotFoundError(f"no exported version (a numbered directory with saved_model.pb) in {export_dir}")
    return os.path.join(export_dir, max(versions, key=int))
