"""When to shrink or save a base model: every N seconds and/or once a day at a given local hour (Paddle-style)."""
import time
from typing import Optional


class DailySchedule:
    """``due(now)`` is True when the work (a shrink, a base save) should run.

    The daily one fires once a day, at the first ``due`` from hour ``at_hour``
    on: a trainer stalled through that hour (a long checkpoint restore, a
    broker outage) runs it late rather than skipping the day. A schedule
    created after the hour first fires the next day, not at start.
    """

    def __init__(self, every_secs: float = 0.0, at_hour: int = -1, start: Optional[float] = None):
        self._every = every_secs
        self._at_hour = at_hour
        self._last = time.time() if start is None else start
        local = time.localtime(self._last)
        # the day of the last daily run: today already, when created past the hour
        self._last_day: Optional[str] = time.strftime("%Y%m%d", local) if local.tm_hour >= at_hour >= 0 else None

    def due(self, now: float) -> bool:
        fire = False
        if self._every > 0 and now - self._last >= self._every:
            fire = True
        if self._at_hour >= 0:
            local = time.localtime(now)
            day = time.strftime("%Y%m%d", local)
            if local.tm_hour >= self._at_hour and day != self._last_day:
                fire = True
                self._last_day = day
        if fire:
            self._last = now
        return fire
