"""When shrinks run: every N seconds, once a day at an hour, and from the trainer loop."""
import time

from easyonline.core.daily_schedule import DailySchedule


def test_every_n_seconds():
    schedule = DailySchedule(every_secs=10, start=1000.0)
    assert not schedule.due(1005.0)
    assert schedule.due(1010.0)
    assert not schedule.due(1015.0)
    assert schedule.due(1021.0)


def test_once_a_day_at_the_hour():
    day = time.mktime((2026, 11, 22, 0, 0, 0, 0, 0, -1))
    schedule = DailySchedule(at_hour=3, start=day)
    assert not schedule.due(day + 2 * 3600)
    assert schedule.due(day + 3 * 3600 + 5)
    assert not schedule.due(day + 3 * 3600 + 600)  # once that day
    assert not schedule.due(day + 27 * 3600 - 60)
    assert schedule.due(day + 27 * 3600 + 1)  # the next day at 03:00


def test_off_by_default():
    schedule = DailySchedule(start=0.0)
    assert not schedule.due(10**9)
