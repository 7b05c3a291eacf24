"""Paddle-style operations on a running trainer: ``save_model`` (its save modes) and ``shrink``."""
from easyonline.protos import pipeline_pb2
from easyonline.publish.base_delta import InferenceSaves
from easyonline.train.training_loop import TrainingLoop


def shrink(trainer: TrainingLoop) -> dict:
    """Evicts now per the tables' eviction configs (Paddle's fleet.shrink()); returns {table: evicted keys}."""
    return trainer.shrink()


def save_model(trainer: TrainingLoop, mode: str = "checkpoint") -> str:
    """Saves now, as Paddle's save modes: "checkpoint" (everything to continue training), "base" (every
    parameter serving needs, no optimizer slots) or "delta" (dense + rows changed since the last base or
    delta). Base and delta go to train_config.inference_save_config's save_dir; returns the path."""
    if mode == "checkpoint":
        return trainer.save_checkpoint()
    if mode not in ("base", "delta"):
        raise ValueError(f"save_model: mode must be checkpoint, base or delta, got {mode!r}")
    saves = next((c for c in trainer.callbacks if isinstance(c, InferenceSaves)), None)
    if saves is None:
        saves = InferenceSaves(pipeline_pb2.InferenceSaveConfig(base_save_at_hour=-1, delta_save_secs=0),
                               trainer.config.model_dir)
        trainer.callbacks.append(saves)
        saves.on_train_begin(trainer)  # from now on it records changed keys for the next delta
    return (saves.save_base(trainer) if mode == "base" else saves.save_delta(trainer)).path
