"""Keeps Python's cyclic garbage collector off the Kafka reader process's path.

A full collection walks every tracked object of the process, and in the
reader process full collections came often: each batch's ~1,000 client
message objects are alive when a young collection runs, so they are
promoted, and the promoted objects soon trigger a full collection, which
walks the modules and everything else start-up made again. ~20% of the
reader's CPU went to the collector, CPU that on two cores comes out of the
training step (tools/bench/input_path.py, "reader process").

``settle`` freezes what start-up made (``gc.freeze``: later collections skip
it) and collects the young generation every ``young_threshold`` allocations
instead of 700, so fewer short-lived objects are promoted. Cycles made
later are still collected.
"""
import gc

YOUNG_THRESHOLD = 10_000


def settle(young_threshold: int = YOUNG_THRESHOLD) -> None:
    """Call once, after start-up and before the loop, in a process that runs the loop until it ends."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, old)
