"""Ratios of a measured setting to a baseline, on a machine whose speed drifts.

A shared machine's speed drifts by 10-20% over minutes (this project's 2-core
one does), more than most costs a benchmark looks for. So runs alternate,
baseline, test, baseline, test, ..., baseline, and each test run is compared
with the mean of the two baseline runs on either side of it; the figure
reported is the median of those ratios, which one disturbed run does not
move. Installed (the benches in tools/bench/ import only the package) so that
every throughput bench, and a user timing a setting of their own, measures
the same way.
"""
from typing import Callable, List, Tuple


def alternate(baseline: Callable[[], float], test: Callable[[], float],
              rounds: int) -> Tuple[List[float], List[float], List[float]]:
    """Runs ``baseline`` rounds + 1 times and ``test`` rounds times, alternating; returns (baseline rates,
    test rates, each test rate over the mean of its two neighbours)."""
    baselines, tests = [baseline()], []
    for _ in range(rounds):
        tests.append(test())
        baselines.append(baseline())
    return baselines, tests, neighbour_ratios(baselines, tests)


def neighbour_ratios(baselines: List[float], tests: List[float]) -> List[float]:
    """Each test rate over the mean of the baseline rates measured just before and just after it."""
    return [test / ((before + after) / 2) for test, before, after in zip(tests, baselines, baselines[1:])]
