"""The callbacks a config asks for: checkpoints, shrinks, the stop file, the dead line, publishing, base/delta
saves."""
from typing import List

from easyonline.core.callbacks import Callback
from easyonline.protos import pipeline_pb2
from easyonline.publish.base_delta import InferenceSaves
from easyonline.publish.publish_callback import IncrementalPublish
from easyonline.train.schedule_callbacks import CheckpointEvery, ShrinkOnSchedule, StopAtDeadLine, StopFile


def default_callbacks(config: pipeline_pb2.PipelineConfig, chief: bool = True) -> List[Callback]:
    """``chief=False`` (a cluster's other trainers): only the stop file; the chief checkpoints and publishes."""
    train = config.train_config
    stops: List[Callback] = [StopAtDeadLine(train.dead_line)] if train.dead_line else []
    if not chief:
        return stops + ([StopFile(config.model_dir, train.stop_signal_poll_secs)] if train.enable_oss_stop_signal else [])
    callbacks: List[Callback] = list(stops)
    if train.shrink_every_secs or train.shrink_at_hour >= 0:
        callbacks.append(ShrinkOnSchedule(train.shrink_every_secs, train.shrink_at_hour))
    if train.enable_oss_stop_signal:
        callbacks.append(StopFile(config.model_dir, train.stop_signal_poll_secs))
    if train.HasField("incr_save_config"):
        callbacks.append(IncrementalPublish(train.incr_save_config, config.model_dir))
    # After publishing: an update due in the same tick as a checkpoint is handed to the publisher's thread
    # first, and goes out while the loop saves (it waited for the whole save before: the freshness p99).
    callbacks.append(CheckpointEvery(train.save_checkpoints_steps, train.save_checkpoints_secs))
    if train.HasField("inference_save_config"):
        callbacks.append(InferenceSaves(train.inference_save_config, config.model_dir))
    return callbacks
