"""Where the update stream stands, kept in model_dir: a restart continues its stream without scanning the sink.

``<model_dir>/UPDATE_STREAM`` is a small JSON file, written by the
publisher's thread (never the training thread), on local disks and OSS alike:

- ``stream_id`` and the sink it numbers (``sink``: the topic or directory);
- ``reserved_through``: no message of the stream was ever numbered above
  it. The publisher raises it by ``RESERVE`` messages *before* it sends a
  message past it, so the file is written once per ``RESERVE`` messages,
  not once per update;
- ``closed``: after a clean stop, the exact last sequence, update id and
  the step it carried; removed again as soon as the next run starts.

A restart therefore never reuses a number, whatever retention did to the
topic: after a clean stop it continues at the next sequence (with a full
sync only if the restored checkpoint is at another step than the stream);
after a crash it continues above the reservation with a full sync, which
readers take as the heal of the gap (at most ``RESERVE`` messages). No file,
or one for another sink, starts a new stream (a random ``stream_id``, from
sequence 1), which readers switch to at its full sync.
"""
import dataclasses
import json
import logging
import secrets
from typing import Optional

from easyonline.utils import fileio

log = logging.getLogger(__name__)

STATE_FILE = "UPDATE_STREAM"
RESERVE = 10_000  # messages numbered per write of the file; far below what a full sync may heal (1,000,000)


@dataclasses.dataclass
class StreamStart:
    """Where a run's publisher starts: its stream, its first sequence and update id, and whether the
    readers' rows may differ from the restored model (then every row is sent once more)."""
    stream_id: int
    next_sequence: int
    next_update_id: int
    full_sync: bool
    reason: str


class StreamPosition:
    """``start(restored_step)`` once, ``reserve(last_sequence, update_id)`` before each send, ``close(...)``."""

    def __init__(self, model_dir: str, sink_name: str):
        self.path = fileio.join(model_dir, STATE_FILE)
        self.sink_name = sink_name
        self.stream_id = 0
        self._reserved = 0
        self._closed: Optional[dict] = None

    def _load(self) -> Optional[dict]:
        try:
            state = json.loads(fileio.read_text(self.path))
        except FileNotFoundError:
            return None
        except ValueError as e:
            log.warning("%s is unreadable (%s): a new update stream starts", self.path, e)
            return None
        if not isinstance(state, dict) or not {"stream_id", "sink", "reserved_through"} <= set(state):
            log.warning("%s lacks stream_id, sink or reserved_through: a new update stream starts", self.path)
            return None
        return state

    def _write(self) -> None:
        state = {"sink": self.sink_name, "stream_id": self.stream_id, "reserved_through": self._reserved,
                 "closed": self._closed}
        fileio.write_text_atomic(self.path, json.dumps(state, indent=1, sort_keys=True) + "\n")

    def start(self, restored_step: int) -> StreamStart:
        """Reads the file, decides where this run numbers from, and reserves its first numbers."""
        state = self._load()
        if state is not None and state["sink"] != self.sink_name:
            log.info("%s numbers the updates of %s, not %s: a new update stream starts", self.path, state["sink"],
                     self.sink_name)
            state = None
        if state is None:
            self.stream_id = secrets.randbits(63) + 1
            start = StreamStart(self.stream_id, 1, 1, restored_step > 0, "new stream")
        else:
            self.stream_id = int(state["stream_id"])
            closed = state.get("closed")
            if closed:
                in_step = int(closed["global_step"]) == restored_step
                start = StreamStart(self.stream_id, int(closed["last_sequence"]) + 1, int(closed["update_id"]) + 1,
                                    not in_step, "continued after a clean stop" +
                                    ("" if in_step else f" at step {closed['global_step']}"))
            else:  # a crash: numbers up to the reservation may be on the stream; the readers' rows are unknown
                after = int(state["reserved_through"])
                start = StreamStart(self.stream_id, after + 1, after + 1, True, "continued above the reservation "
                                    "of a run that did not stop cleanly")
        self._closed = None
        self._reserved = start.next_sequence - 1
        self.reserve(start.next_sequence)
        return start

    def reserve(self, last_sequence: int) -> None:
        """Makes sure the file allows numbering up to ``last_sequence`` (writes it when that passes the
        reservation); raises what the store raises, so that nothing is sent unreserved."""
        if last_sequence > self._reserved:
            self._reserved = last_sequence + RESERVE
            self._write()

    def close(self, last_sequence: int, last_update_id: int, global_step: int) -> None:
        """Records a clean stop: the next run continues exactly after ``last_sequence``."""
        self._closed = {"last_sequence": last_sequence, "update_id": last_update_id, "global_step": global_step}
        self._write()
