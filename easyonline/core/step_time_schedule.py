"""'Every N steps and/or every N seconds', the schedule of checkpoints and publishes."""
import time
from typing import Callable


class StepTimeSchedule:
    """``due(step)`` is True once ``steps`` steps or ``secs`` seconds passed since the last ``mark``."""

    def __init__(self, steps: int = 0, secs: float = 0, clock: Callable[[], float] = time.time):
        self.steps, self.secs = int(steps), float(secs)
        self._clock = clock
        self._last_step = 0
        self._last_time = clock()

    def mark(self, step: int) -> None:
        """The work was done at ``step``, now."""
        self._last_step, self._last_time = step, self._clock()

    def due(self, step: int) -> bool:
        if self.steps and step - self._last_step >= self.steps:
            return True
        return bool(self.secs) and self._clock() - self._last_time >= self.secs
