"""The eval job's results for Prometheus, on ``/metrics`` of ``--metrics_port``.

Each evaluation's figures (AUC, log loss, CTR, samples, the checkpoint's
step, rejected lines, how long it took and when it ended), as gauges of the
latest evaluation (the primary task's; every task's as ``task_<figure>``
gauges with a ``task`` label), and the evaluations done as a counter: an alert on
``easyonline_eval_auc`` or on the age of ``easyonline_eval_last_timestamp_seconds``
watches the model the trainer keeps writing.
"""
import threading
from typing import Iterator, Optional

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from easyonline.eval.evaluator import EvalResult
from easyonline.utils.metrics_server import MetricsServer, task_gauges

PREFIX = "easyonline_eval_"


class EvalMetrics:
    """Serves the latest EvalResult on ``http://host:port/metrics``; ``update`` after each evaluation."""

    def __init__(self, port: int, host: str = "127.0.0.1"):
        self._lock = threading.Lock()
        self._last: Optional[EvalResult] = None
        self._evaluations = 0
        self._rejected = 0
        self._endpoint = MetricsServer(self, port, host)
        self.port = self._endpoint.port

    def update(self, result: EvalResult) -> None:
        with self._lock:
            self._last = result
            self._evaluations += 1
            self._rejected += result.rejected

    def close(self) -> None:
        self._endpoint.close()

    def collect(self) -> Iterator[Metric]:
        """Called by prometheus_client at each scrape."""
        with self._lock:
            last, evaluations, rejected = self._last, self._evaluations, self._rejected
        yield CounterMetricFamily(PREFIX + "evaluations", "checkpoints evaluated", value=evaluations)
        yield CounterMetricFamily(PREFIX + "rejected", "eval input lines rejected", value=rejected)
        if last is None:
            return
        for name, help_text, value in (
                ("auc", "AUC of the latest evaluation", last.auc),
                ("gauc", "AUC within each user's samples, averaged (eval_config's gauc)", last.gauc),
                ("session_auc", "AUC within each session's samples, averaged (eval_config's session_auc)",
                 last.session_auc),
                ("logloss", "log loss of the latest evaluation", last.logloss),
                ("ctr", "share of positive labels in the latest evaluation", last.ctr),
                ("samples", "samples scored in the latest evaluation", last.samples),
                ("checkpoint_step", "global step of the latest evaluated checkpoint", last.step),
                ("last_seconds", "how long the latest evaluation took", last.seconds),
                ("last_timestamp_seconds", "unix time the latest evaluation ended", last.evaluated_at)):
            if value is not None:
                yield GaugeMetricFamily(PREFIX + name, help_text, value=float(value))
        yield from task_gauges(PREFIX, last.tasks)
