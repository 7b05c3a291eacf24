"""One status line every few seconds, and the same figures to TensorBoard."""
import logging
import time
from typing import Dict, Optional

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.train.task_figures import TaskFigures, line_text, scalars

tf = ensure_legacy_keras()
log = logging.getLogger("easyonline.status")


def _fmt(value: Optional[float], spec: str) -> str:
    return "-" if value is None else format(value, spec)


class StatusReporter:
    """Call ``due`` often and ``report`` when it says so.

    ``start_samples``: what the samples count was when this run began (restored with the checkpoint). The
    rate counts from there: from 0, the first line after a restart showed every sample the model had ever
    trained as trained in this run's first seconds (``rate=75481/s`` with nothing trained yet).
    """

    def __init__(self, interval_secs: float, summary_dir: Optional[str] = None, start_samples: int = 0):
        self._interval = interval_secs
        self._writer = tf.summary.create_file_writer(summary_dir) if summary_dir else None
        self._last_time = time.time()
        self._last_samples = start_samples
        self.lines = 0

    def due(self) -> bool:
        return time.time() - self._last_time >= self._interval

    def report(self, step: int, samples: int, lag: Optional[int], auc: Optional[float], logloss: Optional[float],
               ctr: Optional[float], table_sizes: Dict[str, int], rejected: int, extra: str = "",
               tasks: Optional[TaskFigures] = None) -> dict:
        """Logs the line and writes the scalars; ``tasks``: every task's figures (tasks/task_figures.py), which
        replace ``auc``/``logloss``/``ctr`` (the primary binary task's) in both when given."""
        now = time.time()
        rate = (samples - self._last_samples) / max(now - self._last_time, 1e-9)
        self._last_time, self._last_samples = now, samples
        total_keys = sum(table_sizes.values())
        largest = sorted(table_sizes.items(), key=lambda kv: -kv[1])[:3]
        figures = line_text(tasks) if tasks else \
            f"auc={_fmt(auc, '.4f')} logloss={_fmt(logloss, '.4f')} ctr={_fmt(ctr, '.4f')}"
        log.info("step=%d samples=%d rate=%.0f/s lag=%s %s keys=%d (%s) rejected=%d%s",
                 step, samples, rate, "-" if lag is None else lag, figures, total_keys,
                 " ".join(f"{k}:{v}" for k, v in largest), rejected, f" {extra}" if extra else "")
        self.lines += 1
        if self._writer is not None:
            with self._writer.as_default(step=step):
                tf.summary.scalar("samples_per_sec", rate)
                if lag is not None:
                    tf.summary.scalar("consumer_lag", lag)
                named: Dict[str, Optional[float]] = dict(scalars(tasks)) if tasks else \
                    {"prequential_auc": auc, "prequential_logloss": logloss}
                for name, value in named.items():
                    if value is not None:
                        tf.summary.scalar(name, value)
                tf.summary.scalar("table_keys_total", total_keys)
                for name, size in table_sizes.items():
                    tf.summary.scalar(f"table_keys/{name}", size)
                tf.summary.scalar("rejected_lines", rejected)
            self._writer.flush()
        return {"step": step, "samples": samples, "samples_per_sec": rate, "lag": lag, "auc": auc,
                "logloss": logloss, "ctr": ctr, "table_sizes": dict(table_sizes), "rejected": rejected,
                "tasks": dict(tasks or {})}

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
