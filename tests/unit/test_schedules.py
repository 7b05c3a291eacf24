"""'Every N steps / N seconds' (StepTimeSchedule) and 'every N seconds / once a day at an hour' (DailySchedule).

Time is injected (a clock for the first, explicit ``now`` for the second): nothing sleeps.
Day boundaries use local time, built with time.mktime, as the schedule reads it.
"""
import time

import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core.daily_schedule import DailySchedule
from easyonline.core.step_time_schedule import StepTimeSchedule


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def _local(year, month, day, hour=0, minute=0, second=0) -> float:
    return time.mktime((year, month, day, hour, minute, second, 0, 0, -1))


# --- StepTimeSchedule -------------------------------------------------------------------------------


def test_every_n_steps_counts_from_the_last_mark():
    schedule = StepTimeSchedule(steps=100, clock=Clock())
    assert not schedule.due(99)  # 99 - 0 < 100
    assert schedule.due(100)  # 100 - 0 >= 100
    assert schedule.due(100)  # still due until marked
    schedule.mark(130)  # done late, at step 130
    assert not schedule.due(229)  # 229 - 130 = 99
    assert schedule.due(230)  # 230 - 130 = 100


def test_every_n_seconds_counts_from_construction_then_from_the_last_mark():
    clock = Clock(1000.0)
    schedule = StepTimeSchedule(secs=60, clock=clock)
    clock.now = 1059.5
    assert not schedule.due(10**6)  # steps off: only time counts; 59.5 s < 60 s
    clock.now = 1060.0
    assert schedule.due(0)  # 60 s >= 60 s
    clock.now = 1075.0
    schedule.mark(5)
    clock.now = 1134.0
    assert not schedule.due(6)  # 1134 - 1075 = 59 s
    clock.now = 1135.0
    assert schedule.due(6)  # 60 s


def test_steps_or_seconds_whichever_first():
    clock = Clock(0.0)
    schedule = StepTimeSchedule(steps=10, secs=30, clock=clock)
    assert schedule.due(10) and not schedule.due(9)  # by steps, at t=0
    schedule.mark(9)
    clock.now = 30.0
    assert schedule.due(10)  # 1 step but 30 s since the mark
    clock.now = 31.0
    schedule.mark(10)
    assert not schedule.due(19)  # 9 steps, 0 s
    assert schedule.due(20)  # 10 steps


def test_both_zero_is_never_due():
    clock = Clock(0.0)
    schedule = StepTimeSchedule(steps=0, secs=0, clock=clock)
    clock.now = 10.0**9
    assert not schedule.due(10**9)


def test_steps_are_truncated_to_int_and_secs_made_float():
    # config values arrive as proto ints/floats: steps is truncated to int, secs kept as float
    schedule = StepTimeSchedule(steps=2.9, secs=1, clock=Clock(0.0))
    assert (schedule.steps, schedule.secs) == (2, 1.0)
    assert schedule.due(2)  # 2 steps >= int(2.9) = 2


# --- DailySchedule -----------------------------------------------------------------------------------


def test_every_n_seconds_from_start_and_from_each_firing():
    schedule = DailySchedule(every_secs=10, start=1000.0)
    assert not schedule.due(1009.9)
    assert schedule.due(1010.0)  # 10 s after start
    assert not schedule.due(1019.0)  # 9 s after the firing at 1010
    assert schedule.due(1023.0)  # 13 s after it: a late check fires once ...
    assert not schedule.due(1030.0)  # ... and the next period counts from 1023, not from 1020


def test_once_a_day_in_the_given_local_hour():
    midnight = _local(2026, 3, 10)
    schedule = DailySchedule(at_hour=3, start=midnight)
    assert not schedule.due(midnight + 2 * 3600 + 3599)  # 02:59:59
    assert schedule.due(midnight + 3 * 3600)  # 03:00:00
    assert not schedule.due(midnight + 3 * 3600 + 1800)  # 03:30, same day: already done
    assert not schedule.due(midnight + 4 * 3600)  # 04:00
    next_day = _local(2026, 3, 11)
    assert not schedule.due(next_day + 2 * 3600)  # 02:00 the next day
    assert schedule.due(next_day + 3 * 3600 + 59 * 60)  # 03:59 the next day
    assert not schedule.due(next_day + 3 * 3600 + 59 * 60 + 30)


def test_a_day_whose_hour_passed_unchecked_runs_late_and_a_start_past_the_hour_waits_for_the_next_day():
    """A trainer stalled through the hour (a long restore, an outage) makes the day's run up at once: a skipped
    day would let the tables grow, or the delta chain, for another day."""
    midnight = _local(2026, 3, 10)
    schedule = DailySchedule(at_hour=3, start=midnight)
    assert schedule.due(midnight + 5 * 3600)  # first check at 05:00: the hour passed unchecked
    assert not schedule.due(midnight + 6 * 3600)
    assert not schedule.due(_local(2026, 3, 11, 1))  # 01:00 the next day
    assert schedule.due(_local(2026, 3, 11, 3, 1))
    late_start = DailySchedule(at_hour=3, start=midnight + 10 * 3600)  # started at 10:00
    assert not late_start.due(midnight + 10 * 3600 + 1) and not late_start.due(midnight + 23 * 3600)
    assert late_start.due(_local(2026, 3, 11, 3, 0, 1))


def test_at_hour_zero_and_twenty_three_are_honoured():
    for hour in (0, 23):
        schedule = DailySchedule(at_hour=hour, start=_local(2026, 1, 1, (hour + 1) % 24))
        assert not schedule.due(_local(2026, 1, 1, (hour + 1) % 24, 30))
        assert schedule.due(_local(2026, 1, 2, hour, 30))


def test_every_and_at_hour_together_share_the_last_firing():
    midnight = _local(2026, 3, 10)
    schedule = DailySchedule(every_secs=7200, at_hour=3, start=midnight + 3600)  # started at 01:00
    assert schedule.due(midnight + 3 * 3600)  # 03:00: the hour (and 2 h since 01:00)
    assert not schedule.due(midnight + 4 * 3600)  # 04:00: 1 h since the last firing
    assert schedule.due(midnight + 5 * 3600)  # 05:00: 2 h since 03:00
    assert not schedule.due(midnight + 6 * 3600)  # 06:00: 1 h


def test_off_by_default_and_with_negative_hour():
    assert not DailySchedule(start=0.0).due(10.0**9)
    assert not DailySchedule(every_secs=0, at_hour=-1, start=0.0).due(_local(2026, 6, 1, 3))


def test_start_defaults_to_now():
    before = time.time()
    schedule = DailySchedule(every_secs=3600)
    assert not schedule.due(before + 3599)  # started at or after `before`: less than an hour passed
    assert schedule.due(time.time() + 3600)
