"""The trainer's own schedules as callbacks: checkpoints, shrinks, the stop file and the dead line."""
import datetime
import logging
import time

from easyonline.core.callbacks import Callback, TrainerView
from easyonline.core.daily_schedule import DailySchedule
from easyonline.core.errors import error_text
from easyonline.core.step_time_schedule import StepTimeSchedule
from easyonline.core.stop_signal import STOP_SIGNAL_FILE
from easyonline.utils import fileio

log = logging.getLogger(__name__)


class CheckpointEvery(Callback):
    """Checkpoints (with the stream positions) every N steps and/or every N seconds.

    It saves at the tick (which the loop dispatches right after each batch's ``on_batch_end``, and while it
    waits for input), so callbacks placed before it, such as IncrementalPublish, act on the batch first."""

    def __init__(self, steps: int = 0, secs: float = 0):
        self._schedule = StepTimeSchedule(steps, secs)

    def on_train_begin(self, trainer: TrainerView) -> None:
        self._schedule.mark(trainer.step)

    def on_tick(self, trainer: TrainerView) -> None:
        if trainer.step != trainer.last_saved_step and self._schedule.due(trainer.step):
            trainer.save_checkpoint()
            self._schedule.mark(trainer.step)


class ShrinkOnSchedule(Callback):
    """Runs trainer.shrink() every N seconds and/or once a day at a local hour."""

    def __init__(self, every_secs: float = 0, at_hour: int = -1):
        self._schedule = DailySchedule(every_secs, at_hour)

    def on_tick(self, trainer: TrainerView) -> None:
        if self._schedule.due(trainer.clock()):
            trainer.shrink()


class StopFile(Callback):
    """Stops the trainer when ``model_dir/OSS_STOP_SIGNAL`` appears (polled every ``poll_secs``)."""

    def __init__(self, model_dir: str, poll_secs: float = 2.0):
        self.path = fileio.join(model_dir, STOP_SIGNAL_FILE)
        self._poll_secs = poll_secs
        self._next = 0.0

    def on_tick(self, trainer: TrainerView) -> None:
        now = time.time()
        if now < self._next:
            return
        self._next = now + self._poll_secs
        try:
            if fileio.exists(self.path):
                trainer.stop(f"found stop signal {self.path}")
        except Exception as e:  # pylint: disable=broad-except
            # OSError locally; oss2's errors (not OSErrors) on OSS: a transient one must not stop training
            log.warning("cannot check stop signal %s (%s); trying again in %.0f s", self.path, error_text(e),
                        self._poll_secs)


class StopAtDeadLine(Callback):
    """Stops the trainer at a local time, "YYYYMMDD HH:MM:SS" (EasyRec's ``train_config.dead_line``)."""

    def __init__(self, dead_line: str):
        self.dead_line = dead_line.strip()
        self._at = datetime.datetime.strptime(self.dead_line, "%Y%m%d %H:%M:%S").timestamp()

    def on_batch_end(self, trainer: TrainerView, raw_batch, parsed_batch, probs) -> None:
        self.on_tick(trainer)

    def on_tick(self, trainer: TrainerView) -> None:
        if time.time() >= self._at:
            trainer.stop(f"reached dead_line {self.dead_line}")
