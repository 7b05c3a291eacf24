"""Writes a timestamped SavedModel version from a checkpoint, ready for the serving processor.

The version holds ``serving_default`` and, unless exported for prediction
only, the update signatures ``incr_update_sig`` and ``incr_update_message_sig``
(signed: they apply only updates whose MAC the trainer's secret made; see
serving_module.py and updates/signing.py) and, in ``assets/``, the config, the parameter id maps
copied from model_dir (the ones the trainer publishes with) and
``incr_update.txt``: where the update stream is and from which position its
messages are newer than this export, and whether the export is for stock
TensorFlow Serving (core ops only; ``for_stock_serving``). TFRA's inference mode
(lookups of unknown ids insert nothing) is process-global: the export holds it
only while it runs and gives the process back in the mode it found, so a trainer
built later in the same process still gets gradients for its tables.
"""
import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
from typing import Dict, Iterator, Optional, Tuple

from easyonline.checkpoint.checkpointer import latest_checkpoint
from easyonline.checkpoint.restore import restore_model
from easyonline.config.loader import to_text
from easyonline.config.secrets import apply_oss_config
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.export.core_tables import core_tables
from easyonline.export.embedding_files import export_embeddings
from easyonline.core.errors import ConfigError
from easyonline.export.layout import (ASSETS_DIR, DENSE_SHAPES_FILE, INCR_UPDATE_FILE, NO_UPDATES, PIPELINE_FILE,
                                      PREDICTIONS_FILE, SAVED_MODEL_FILE, SERVING_SIGNATURE, SIGNED, STOCK_SERVING_KEY,
                                      UNSIGNED, UPDATE_MESSAGE_SIGNATURE, UPDATE_SIGNATURE, UPDATE_SIGNATURES_KEY)
from easyonline.export.serving_module import ServingModule
from easyonline.protos import pipeline_pb2
from easyonline.tasks.output_names import prediction_names
from easyonline.updates.param_ids import dense_variables, ensure_parameter_ids
from easyonline.updates.signing import SECRET_FIELD, signing_secret, siphash_key
from easyonline.updates.transport import KAFKA, StreamLocation, open_reader, stream_model_name
from easyonline.utils import fileio, oss

tf = ensure_legacy_keras()
from tensorflow_recommenders_addons import dynamic_embedding as de  # noqa: E402  pylint: disable=g-import-not-at-top

log = logging.getLogger(__name__)


def update_stream_info(config: pipeline_pb2.PipelineConfig, step: int) -> dict:
    """What incr_update.txt says: the update stream and the first message a server of a checkpoint at ``step``
    applies, the first stamped ``step`` or later (readers.py ``start_at_step``; a few it replays hold rows
    the checkpoint has already: applying a row again is harmless)."""
    train = config.train_config
    if not train.HasField("incr_save_config"):
        return {"storage": "none", "step": step}
    incr = train.incr_save_config
    model_name = stream_model_name(incr, config.model_dir)
    location = StreamLocation.from_config(incr)
    reader = open_reader(location)
    try:
        position, sequence, stream_id = reader.start_at_step(model_name, step)
        lost = getattr(reader, "lost", None)
    finally:
        reader.close()
    info = {"model_name": model_name, "step": step, **location.to_info(), "sequence": sequence}
    if lost:  # the server starts behind, and heals at the next full sync
        log.warning("exporting step %d: %s; servers of this export are behind until the next full sync", step, lost)
        info["behind"] = lost
    if stream_id is not None:
        info["stream_id"] = stream_id
    if location.storage == KAFKA:
        info["offset"] = position
    return info


def update_signature_mode(config: pipeline_pb2.PipelineConfig, asked: str = "") -> Tuple[str, Optional[Tuple[int, int]]]:
    """(mode, SipHash key or None) of ``export --update_signatures``: signed needs the config's signing secret."""
    secret = signing_secret(config.train_config.incr_save_config)
    mode = asked or (SIGNED if secret else NO_UPDATES)
    if mode not in (SIGNED, UNSIGNED, NO_UPDATES):
        raise ConfigError("--update_signatures", f"{mode!r} is not one of {SIGNED}, {UNSIGNED}, {NO_UPDATES}")
    if mode == SIGNED and not secret:
        raise ConfigError("--update_signatures", f"signed update signatures need the trainer's secret: set {SECRET_FIELD} "
                                                 "(e.g. \"${UPDATE_SECRET}\"), or export with --update_signatures=none")
    if not asked and not secret:
        log.info("the export has no update signatures (no %s): TF Serving serves it for prediction only; serve "
                 "follows the update stream as ever", SECRET_FIELD)
    return mode, (siphash_key(secret) if mode == SIGNED else None)


def _update_signatures(module: ServingModule, mode: str) -> Dict:
    if mode == SIGNED:
        return {UPDATE_SIGNATURE: module.incr_update_signed, UPDATE_MESSAGE_SIGNATURE: module.incr_update_messages_signed}
    if mode == UNSIGNED:
        return {UPDATE_SIGNATURE: module.incr_update, UPDATE_MESSAGE_SIGNATURE: module.incr_update_messages}
    return {}


def export_saved_model(config: pipeline_pb2.PipelineConfig, export_dir: str,
                       checkpoint_path: Optional[str] = None, embedding_export_dir: Optional[str] = None,
                       for_stock_serving: bool = False, update_signatures: str = "") -> str:
    """Exports the checkpoint (default: the latest in model_dir); returns the new version's path.

    With ``embedding_export_dir``, also writes every table's keys and vectors there (embedding_files.py).
    With ``for_stock_serving``, the tables become TensorFlow core hash tables (core_tables.py): the
    SavedModel uses core ops only, so stock TensorFlow Serving (or any TensorFlow without TFRA) loads it.
    ``update_signatures`` (``update_signature_mode``): signed (they verify each update's MAC in the graph),
    unsigned (they apply anything: only where nobody else reaches the server's ports), none (prediction only);
    "" signed when the config has a signing secret, else none.
    """
    mode, key = update_signature_mode(config, update_signatures)
    apply_oss_config(config)
    path = latest_checkpoint(checkpoint_path or config.model_dir)
    if path is None:
        raise FileNotFoundError(f"no checkpoint at {checkpoint_path or config.model_dir}")
    with inference_mode():
        return _export_version(config, export_dir, path, embedding_export_dir, for_stock_serving, mode, key)


@contextlib.contextmanager
def inference_mode() -> Iterator[None]:
    """TFRA's inference mode for the block, then the mode the process was in (it is process-global)."""
    previous = de.ModelMode.CURRENT_SETTING
    de.enable_inference_mode()
    try:
        yield
    finally:
        de.ModelMode.CURRENT_SETTING = previous


def _export_version(config: pipeline_pb2.PipelineConfig, export_dir: str, path: str,
                    embedding_export_dir: Optional[str], for_stock_serving: bool, mode: str,
                    key: Optional[Tuple[int, int]]) -> str:
    log.info("restoring %s", path)
    restored = restore_model(config, path)
    model, specs, step = restored.model, restored.specs, restored.step
    log.info("restored step %d (%s embedding rows); writing the SavedModel", step,
             f"{sum(int(layer.params.size()) for layer in model.tables.embeddings.values()):,}")
    ids = ensure_parameter_ids(config.model_dir, model)
    module = ServingModule(model, specs, ids, core_tables(model) if for_stock_serving else None, key)
    if embedding_export_dir:
        counts = export_embeddings(model, embedding_export_dir, path, step)
        log.info("wrote %d embedding rows of %d tables to %s", sum(counts.values()), len(counts), embedding_export_dir)
    version = str(int(time.time()))
    while fileio.exists(fileio.join(export_dir, version)):
        version = str(int(version) + 1)
    # TensorFlow writes SavedModels to local disk: an oss:// export is staged locally, then uploaded.
    remote = fileio.is_oss(export_dir)
    staging = tempfile.mkdtemp(prefix="easyonline-export-") if remote else \
        os.path.join(export_dir, f".staging-{version}")
    tf.saved_model.save(module, staging,
                        signatures={SERVING_SIGNATURE: module.serve, **_update_signatures(module, mode)},
                        # a TFRA op left in a stock export makes TensorFlow refuse to save it
                        options=tf.saved_model.SaveOptions(namespace_whitelist=[] if for_stock_serving
                                                           else ["TFRA"]))
    assets = os.path.join(staging, ASSETS_DIR)
    os.makedirs(assets, exist_ok=True)
    for name, text in ids.to_files().items():
        fileio.write_text_atomic(os.path.join(assets, name), text)
    fileio.write_text_atomic(os.path.join(assets, PIPELINE_FILE), to_text(config))
    shapes = {ids.dense[name]: list(variable.shape) for name, variable in dense_variables(model).items()}
    fileio.write_text_atomic(os.path.join(assets, DENSE_SHAPES_FILE), json.dumps(shapes, sort_keys=True) + "\n")
    fileio.write_text_atomic(os.path.join(assets, PREDICTIONS_FILE), json.dumps(prediction_names(model.tasks)) + "\n")
    info = update_stream_info(config, step)
    info.update(checkpoint=path, exported_at=time.time(), **{STOCK_SERVING_KEY: for_stock_serving,
                                                              UPDATE_SIGNATURES_KEY: mode})
    fileio.write_text_atomic(os.path.join(assets, INCR_UPDATE_FILE), json.dumps(info, indent=1) + "\n")
    final = fileio.join(export_dir, version)
    if remote:
        oss.upload_tree(staging, final, last=SAVED_MODEL_FILE)  # a version is complete once it has this
        shutil.rmtree(staging, ignore_errors=True)
    else:
        os.rename(staging, final)
    log.info("exported %s (step %d) to %s; updates from %s", path, step, final, info)
    return final
