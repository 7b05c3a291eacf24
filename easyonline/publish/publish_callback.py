"""IncrementalPublish: the trainer's callback that publishes changed parameters on schedule.

Built from ``train_config.incr_save_config`` by the default callbacks; users
of ``online_train`` can construct it themselves (for example with their own
sink). It subscribes to the trainer's change tracker, hands a job to the
UpdatePublisher when a dense or sparse publish is due and the sender has
room, reports acknowledged updates to ``on_publish`` callbacks, and at the
end publishes the final state and waits for it to be acknowledged.

Every ``full_sync_secs`` (and at a restart that needs one) the update is a
full sync: every row and dense parameter once more. A server that missed or
refused a message is behind until it applies one whole; this bounds how long.
"""
import logging
import time
from typing import Any, Dict, Optional

from easyonline.core.callbacks import Callback, TrainerView
from easyonline.core.step_time_schedule import StepTimeSchedule
from easyonline.embedding.change_tracker import ChangeLog
from easyonline.protos import pipeline_pb2
from easyonline.publish.publisher import PublishJob, UpdatePublisher
from easyonline.updates.param_ids import dense_variables, ensure_parameter_ids
from easyonline.updates.signing import signer
from easyonline.updates.transport import UpdateSink, open_sink, stream_model_name

log = logging.getLogger(__name__)


def _schedule(steps: int, secs: float, secs_given: bool) -> StepTimeSchedule:
    """EasyRec semantics: steps alone mean steps only; the seconds default applies when neither is given."""
    return StepTimeSchedule(steps, secs if (secs_given or not steps) else 0)


class IncrementalPublish(Callback):
    """Publishes dense parameters and changed rows (and deletes) while training."""

    def __init__(self, incr: pipeline_pb2.IncrSaveConfig, model_dir: str, sink: Optional[UpdateSink] = None):
        self.incr = incr
        self.model_dir = model_dir
        self.model_name = stream_model_name(incr, model_dir)
        if not incr.model_name:
            log.warning("updates are published as model %r, the last part of model_dir %s: another trainer whose "
                        "model_dir ends alike would publish as the same model on a shared topic; set "
                        "incr_save_config.model_name", self.model_name, model_dir)
        self.sink = sink or open_sink(incr)
        self._dense_schedule = _schedule(incr.dense_save_steps, incr.dense_save_secs, incr.HasField("dense_save_secs"))
        self._sparse_schedule = _schedule(incr.sparse_save_steps, incr.sparse_save_secs,
                                          incr.HasField("sparse_save_secs"))
        self.publisher: Optional[UpdatePublisher] = None
        self.tracker: Optional[ChangeLog] = None
        self._last_sparse_time = time.time()
        self._dense_vars: Dict[int, Any] = {}
        self._dense_owed = False
        self._last_full_sync = time.time()

    def on_train_begin(self, trainer: TrainerView) -> None:
        ids = ensure_parameter_ids(self.model_dir, trainer.model)
        self._dense_vars = {ids.dense[name]: var for name, var in dense_variables(trainer.model).items()}
        self.tracker = trainer.changes.subscribe()
        self.publisher = UpdatePublisher(self.sink, self.model_name, ids, trainer.table_rows(),
                                         self.incr.max_message_bytes, self.model_dir, self.incr.max_pending_updates,
                                         self.incr.full_sync_send_bytes, signer(self.incr))
        self.publisher.lease = trainer.writer_lock  # nothing is sent once another trainer took model_dir over
        self.publisher.start(trainer.step)
        self._dense_schedule.mark(trainer.step)
        self._sparse_schedule.mark(trainer.step)

    def _started(self):
        """(publisher, change log), which ``on_train_begin`` made."""
        if self.publisher is None or self.tracker is None:
            raise RuntimeError("IncrementalPublish: on_train_begin was not called")
        return self.publisher, self.tracker

    def on_tick(self, trainer: TrainerView) -> None:
        self._maybe_publish(trainer)
        for result in self._started()[0].results():
            trainer.dispatch("on_publish", result)

    def _job(self, trainer: TrainerView, dense: bool, full_sync: bool = False) -> PublishJob:
        """The keys trained since the last job, the dense values now, stamped with the step read after both.

        A server started from an export at step S applies the messages stamped S or later (the exporter);
        a row trained after the export's checkpoint read it was recorded after that read, so is drained by
        a job whose step is read later still: at least S. In a cluster the other trainers step while the
        chief saves and publishes: its own last step (``trainer.step``) can be below the checkpoint's
        while the job holds rows trained after it, which is why the step is read now."""
        trained, deleted = self._started()[1].drain()
        values = trainer.read_variables(self._dense_vars) if dense else None
        step = trainer.read_step()
        return PublishJob(step, time.time(), dict(trainer.positions), values, trained, deleted, full_sync)

    def _maybe_publish(self, trainer: TrainerView) -> None:
        publisher = self._started()[0]
        if not publisher.has_room():
            self._dense_owed = self._dense_owed or self._dense_schedule.due(trainer.step)
            return  # keys keep merging in the tracker
        if publisher.take_full_sync() or self._full_sync_due():
            publisher.offer(self._job(trainer, dense=True, full_sync=True))
            self._last_full_sync = self._last_sparse_time = time.time()
            self._dense_owed = False
            return
        dense = self._dense_owed or self._dense_schedule.due(trainer.step)
        sparse = self._sparse_schedule.due(trainer.step) or self._caught_up_due(trainer)
        if not (dense or sparse):
            return
        publisher.offer(self._job(trainer, dense))
        self._last_sparse_time = time.time()
        self._dense_owed = False
        if dense:
            self._dense_schedule.mark(trainer.step)
        if sparse:
            self._sparse_schedule.mark(trainer.step)

    def _full_sync_due(self) -> bool:
        every = self.incr.full_sync_secs
        return every > 0 and time.time() - self._last_full_sync >= every

    def _caught_up_due(self, trainer: TrainerView) -> bool:
        """Changed rows wait, the input has no lag, and sparse_save_secs_caught_up passed since the last update."""
        wait = self._caught_up_wait(trainer)
        return wait is not None and wait <= 0

    def _caught_up_wait(self, trainer: TrainerView) -> Optional[float]:
        """Seconds until a caught-up trainer's next update is due (<= 0: now); None when none is coming (off,
        behind its input, or no changed row waits)."""
        every = self.incr.sparse_save_secs_caught_up
        if every <= 0 or trainer.lag != 0 or self._started()[1].pending_ids == 0:
            return None
        return every - (time.time() - self._last_sparse_time)

    def next_tick_in(self, trainer: TrainerView) -> Optional[float]:
        """When rows trained by a caught-up trainer wait for sparse_save_secs_caught_up: the loop ticks when it
        has passed, not at the next batch (which may come a whole batch_timeout_ms later)."""
        if self.publisher is None or not self.publisher.has_room():
            return None
        return self._caught_up_wait(trainer)

    def on_train_end(self, trainer: TrainerView, summary: Any) -> None:
        """Publishes the final state (dense and every pending key) and waits for it, up to flush_timeout_secs."""
        publisher = self._started()[0]
        timeout = self.incr.flush_timeout_secs
        deadline = time.time() + timeout  # one budget for queueing and sending, not one each
        full_sync = publisher.take_full_sync() or self._full_sync_due()
        sent = publisher.offer(self._job(trainer, dense=True, full_sync=full_sync), timeout=timeout)
        flushed = publisher.close(max(deadline - time.time(), 0)) and sent
        for result in publisher.results():
            trainer.dispatch("on_publish", result)
        if flushed:
            log.info("published the final update (sequence %s) to %s", (publisher.next_sequence or 0) - 1,
                     self.sink.description)
        else:
            log.error("the last updates did not reach %s within %.0f s (%s); the next start re-sends every row",
                      self.sink.description, timeout, publisher.error or "timed out")

    def status_fields(self) -> Dict[str, str]:
        publisher = self.publisher
        if publisher is None:
            return {}
        idle = self._started()[1].pending_ids == 0 and publisher.pending == 0
        last = publisher.last_acked
        # How stale serving is: 0 when nothing is waiting, else the age of the newest update it has.
        lag = "0.0s" if idle and last is not None else "-" if last is None else f"{time.time() - last.create_time:.1f}s"
        fields = {"pub_seq": "-" if last is None else str(last.last_sequence), "pub_lag": lag,
                  "pub_queue": f"{publisher.pending}/{self.incr.max_pending_updates}"}
        if publisher.guard.total:  # rows and dense parameters left out for NaN or inf, since start
            fields["pub_nonfinite"] = str(publisher.guard.total)
        if publisher.error:
            fields["pub_error"] = f"down {time.time() - (publisher.error_since or time.time()):.0f}s"
        return fields
