"""The other trainers of a cluster hold still while the chief saves a checkpoint, so it holds every row.

A TFRA table on a ps is saved by exporting it: its size is read, then that
many rows are copied out of the cuckoo table. A row another trainer inserts
meanwhile can move rows the copy has not reached yet (a cuckoo insert
displaces them, a full table doubles), so a checkpoint saved while workers
step could miss rows that were trained long before it, and a trainer
restored from it would have lost them. Paddle's trainers stop at a barrier
around a save for the same reason.

The chief raises ``pause`` to a new generation, then waits until every other
trainer that joined and has not finished is either outside a step or has
acknowledged the generation. A trainer marks itself inside a step and then
reads ``pause`` before each step (``begin_step``); its step marks it out
once its updates are written and reads ``pause`` again. Because each side
writes before it reads the other's variable, either the trainer sees the
pause (and acknowledges it instead of stepping) or the chief sees it inside
a step and waits for the step's end. A paused trainer holds until the chief
lowers ``pause``. Both waits are bounded: a trainer that does not answer
within ``CHIEF_WAIT_SECS`` (killed in a step) is named in a warning and the
save goes ahead, as it did before; a trainer held longer than
``TRAINER_HOLD_SECS`` (a chief that died while saving) logs that and steps
on. A restarted chief lowers a pause left raised.
"""
import contextlib
import logging
import time
from typing import Callable, Iterator, List

import numpy as np

from easyonline.distributed.shared_state import ClusterState

log = logging.getLogger(__name__)

CHIEF_WAIT_SECS = 30.0
TRAINER_HOLD_SECS = 600.0
_POLL_SECS = 0.01
_LOG_SECS = 10.0


class SavePause:
    """One trainer's side of the pause: the chief's ``others_paused``, every other trainer's ``before_step``
    and ``after_step``. ``session_run``: the trainer's session.run; ``should_stop``: its stop signal."""

    def __init__(self, session_run: Callable, state: ClusterState, begin_step, trainer_index: int,
                 num_trainers: int, should_stop: Callable[[], bool]):
        self._run = session_run
        self._state = state
        self._begin_step = begin_step
        self._trainer = trainer_index
        self._num_trainers = num_trainers
        self._should_stop = should_stop
        self._generation = 0
        self.last_wait_secs = 0.0  # the chief's wait for the others at its last save

    # --- every trainer but the chief ---------------------------------------------------------
    def before_step(self) -> None:
        """Marks this trainer inside a step; if the chief asked for a pause, acknowledges it and holds first."""
        pause = int(self._run(self._begin_step))
        while pause:
            self._hold(pause)
            pause = int(self._run(self._begin_step))

    def after_step(self, pause: int) -> None:
        """``pause``: the value the step read after its updates; holds at once rather than at the next step."""
        if pause:
            self._hold(pause)

    def _hold(self, generation: int) -> None:
        state = self._state
        self._run(state.ack_pause, {state.generation_in: generation, state.trainer_in: self._trainer})
        started = last_log = time.time()
        while int(self._run(state.pause)) == generation and not self._should_stop():
            waited = time.time() - started
            if waited > TRAINER_HOLD_SECS:
                log.warning("trainer %d: held %.0fs for the chief's checkpoint, longer than %.0fs; stepping on "
                            "(did the chief die while saving?)", self._trainer, waited, TRAINER_HOLD_SECS)
                return
            if time.time() - last_log >= _LOG_SECS:
                log.info("trainer %d: holding while the chief saves a checkpoint (%.0fs)", self._trainer, waited)
                last_log = time.time()
            time.sleep(_POLL_SECS)

    # --- the chief -----------------------------------------------------------------------------
    def lower(self) -> None:
        """Lowers a pause a chief that died while saving left raised (a restarted chief, before it steps)."""
        self._run(self._state.set_pause, {self._state.generation_in: 0})

    @contextlib.contextmanager
    def others_paused(self) -> Iterator[None]:
        """The other trainers hold still inside; the wait for them is ``last_wait_secs``."""
        if self._num_trainers <= 1:
            self.last_wait_secs = 0.0
            yield
            return
        state = self._state
        if not self._generation:  # after a chief restart, past every generation the trainers acknowledged
            self._generation = int(np.max(self._run(state.paused)))
        self._generation += 1
        self._run(state.set_pause, {state.generation_in: self._generation})
        try:
            started = time.time()
            late = self._wait_for_others(self._generation)
            self.last_wait_secs = time.time() - started
            if late:
                log.warning("trainer(s) %s did not hold still within %.0fs (killed inside a step?): saving the "
                            "checkpoint while they may write", late, CHIEF_WAIT_SECS)
            yield
        finally:
            self._run(state.set_pause, {state.generation_in: 0})

    def _wait_for_others(self, generation: int) -> List[int]:
        """Waits until every other joined, unfinished trainer is outside a step or paused; returns those late."""
        deadline = time.time() + CHIEF_WAIT_SECS
        while True:
            reads = self._run(self._state.pause_reads)
            busy = [i for i in range(self._num_trainers) if i != self._trainer and reads["started"][i]
                    and not reads["finished"][i] and reads["stepping"][i] and reads["paused"][i] != generation]
            if not busy or time.time() > deadline or self._should_stop():
                return busy
            time.sleep(_POLL_SECS)
