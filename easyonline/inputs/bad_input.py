"""Bad input: counted by kind, logged at a bounded rate, dead-lettered, and a ceiling.

A streaming trainer runs for months on data it does not control. A bad
sample must never stop it, but a stream that turned to garbage (a producer
bug, a schema change) must: training on it would ruin the model. So the
trainer stops with BadInputError when more than ``max_bad_fraction`` of the
last ``bad_input_window`` lines were rejected.
"""
import collections
import logging
import time
from typing import Deque, Dict, List, Optional, Tuple

from easyonline.core.errors import BadInputError
from easyonline.inputs.dead_letter import DeadLetterSink
from easyonline.core.rejections import REJECTION_KINDS, rejection_kind
from easyonline.protos import pipeline_pb2

log = logging.getLogger(__name__)




class BadInputMonitor:
    def __init__(self, data: pipeline_pb2.DataConfig, dead_letter: Optional[DeadLetterSink] = None,
                 log_every_secs: float = 10.0):
        self.max_fraction = data.max_bad_fraction
        self.window = data.bad_input_window
        self.dead_letter = dead_letter
        self.counts: Dict[str, int] = {kind: 0 for kind in REJECTION_KINDS}
        self.empty_messages = 0
        self._recent: Deque[Tuple[int, int]] = collections.deque()  # (lines, bad) per batch
        self._recent_lines = self._recent_bad = 0
        self._log_every = log_every_secs
        self._next_log = 0.0
        self._unlogged: Dict[str, int] = collections.Counter()
        self._example: Optional[Tuple[bytes, str]] = None

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def record(self, good: int, rejected: List[Tuple[bytes, str]], empty_messages: int = 0) -> None:
        """Accounts one batch; raises BadInputError when the ceiling is crossed."""
        self.empty_messages += empty_messages
        for line, reason in rejected:
            kind = rejection_kind(reason)
            self.counts[kind] += 1
            self._unlogged[kind] += 1
            if self._example is None:
                self._example = (line, reason)
            if self.dead_letter is not None:
                self.dead_letter.send(line, reason)
        self._log_if_due()
        self._check_ceiling(good + len(rejected), len(rejected))

    def _log_if_due(self) -> None:
        now = time.time()
        if not self._unlogged or now < self._next_log:
            return
        counts = " ".join(f"{k}={v}" for k, v in sorted(self._unlogged.items()))
        line, reason = self._example or (b"", "")
        log.warning("rejected %d sample(s) (%s); e.g. %s: %r", sum(self._unlogged.values()), counts, reason,
                    line[:200])
        self._unlogged.clear()
        self._example = None
        self._next_log = now + self._log_every

    def _check_ceiling(self, lines: int, bad: int) -> None:
        self._recent.append((lines, bad))
        self._recent_lines += lines
        self._recent_bad += bad
        while self._recent and self._recent_lines - self._recent[0][0] >= self.window:
            old_lines, old_bad = self._recent.popleft()
            self._recent_lines -= old_lines
            self._recent_bad -= old_bad
        if self.max_fraction < 1 and self._recent_lines >= self.window and \
                self._recent_bad > self.max_fraction * self._recent_lines:
            counts = ", ".join(f"{k}={v}" for k, v in self.counts.items() if v)
            raise BadInputError(
                f"{self._recent_bad} of the last {self._recent_lines} lines were rejected "
                f"(over data_config.max_bad_fraction={self.max_fraction:g}); stopping rather than training on "
                f"garbage. Rejections so far: {counts}. The checkpoint holds everything trained until now; "
                f"fix the producer (see the dead-letter topic or the log for examples) and restart")

    def status_fields(self) -> Dict[str, str]:
        fields = {k: str(v) for k, v in self.counts.items() if v}
        if self.empty_messages:
            fields["empty_messages"] = str(self.empty_messages)
        if self.dead_letter is not None and self.dead_letter.failed:
            fields["dead_letter_failed"] = str(self.dead_letter.failed)
        return {f"bad.{k}": v for k, v in fields.items()}

    def close(self) -> None:
        self._next_log = 0.0
        self._log_if_due()
        if self.dead_letter is not None:
            self.dead_letter.close()
