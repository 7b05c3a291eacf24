"""The trainer's figures for Prometheus, on ``/metrics`` of ``--metrics_port``.

The same numbers as the status line (rate, consumer lag, prequential AUC,
logloss, CTR of the primary task and every task's figures with a ``task``
label, table sizes, rejected input, input wait, publishing lag and
sequence), with Prometheus' types: counters end in ``_total``. They are
taken at each status line (every ``log_step_count_secs``) on the training
thread; a scrape reads that snapshot, so it never touches the model or the
metrics while a batch trains.
"""
import threading
from typing import Any, Dict, Iterator, Optional

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from easyonline.core.callbacks import Callback, TrainerView
from easyonline.utils.metrics_server import MetricsServer, task_gauges

PREFIX = "easyonline_trainer_"


def _number(text: Any) -> Optional[float]:
    """A status field's number ("12", "0.4s", "3/1000" -> 3), or None ("-")."""
    if isinstance(text, (int, float)):
        return float(text)
    head = str(text).split("/", 1)[0].rstrip("s%")
    try:
        return float(head)
    except ValueError:
        return None


class PrometheusMetrics(Callback):
    """Serves the last status line's figures on ``http://host:port/metrics`` while the trainer runs."""

    def __init__(self, port: int, host: str = "127.0.0.1"):
        self._lock = threading.Lock()
        self._logs: Dict[str, Any] = {}
        self._endpoint = MetricsServer(self, port, host)
        self.port = self._endpoint.port

    def on_metrics(self, trainer: TrainerView, logs: Dict[str, Any]) -> None:
        with self._lock:
            self._logs = dict(logs)

    def on_train_end(self, trainer: TrainerView, summary: Any) -> None:
        self._endpoint.close()

    def collect(self) -> Iterator[Metric]:
        """Called by prometheus_client at each scrape."""
        with self._lock:
            logs = dict(self._logs)
        if not logs:
            return

        def gauge(name: str, help_text: str, value: Any) -> Iterator[Metric]:
            number = _number(value) if value is not None else None
            if number is not None:
                yield GaugeMetricFamily(PREFIX + name, help_text, value=number)

        yield CounterMetricFamily(PREFIX + "steps", "training steps (batches) of this model_dir", value=logs["step"])
        yield CounterMetricFamily(PREFIX + "samples", "samples trained in this model_dir", value=logs["samples"])
        yield from gauge("samples_per_second", "training rate since the previous status line", logs["samples_per_sec"])
        yield from gauge("consumer_lag", "records of the input topic not yet read", logs.get("lag"))
        yield from gauge("auc", "prequential AUC over metrics_window_samples", logs.get("auc"))
        yield from gauge("logloss", "prequential logloss over metrics_window_samples", logs.get("logloss"))
        yield from gauge("ctr", "share of positive labels over metrics_window_samples", logs.get("ctr"))
        yield from task_gauges(PREFIX, logs.get("tasks") or {})
        yield from gauge("input_wait_share", "share of time the loop waited for input", logs.get("input_wait"))
        yield CounterMetricFamily(PREFIX + "rejected", "input lines or messages rejected", value=logs["rejected"])
        yield CounterMetricFamily(PREFIX + "offsets_skipped", "Kafka offsets never trained: positions out of range "
                                  "(retention deleted them) moved into range, at the start and while reading",
                                  value=_number(logs.get("offsets_skipped", 0)) or 0)
        bad = CounterMetricFamily(PREFIX + "bad_input", "rejected input by kind", labels=["kind"])
        for key, value in logs.items():
            number = _number(value) if key.startswith("bad.") else None
            if number is not None:
                bad.add_metric([key[len("bad."):]], number)
        yield bad
        keys = GaugeMetricFamily(PREFIX + "table_keys", "ids in each embedding table", labels=["table"])
        for table, size in sorted(logs.get("table_sizes", {}).items()):
            keys.add_metric([table], size)
        yield keys
        yield from gauge("published_sequence", "sequence of the last update the sink acknowledged", logs.get("pub_seq"))
        yield from gauge("publish_lag_seconds", "age of the newest published update while changes wait (0: idle)",
                         logs.get("pub_lag"))
        yield from gauge("publish_queue", "updates waiting to be sent", logs.get("pub_queue"))
        if "pub_nonfinite" in logs:
            yield CounterMetricFamily(PREFIX + "publish_nonfinite", "embedding rows and dense parameters not "
                                      "published for NaN or infinite values", value=_number(logs["pub_nonfinite"]))
        if "pub_error" in logs:
            yield from gauge("publish_down_seconds", "how long the update sink has been failing",
                             str(logs["pub_error"]).replace("down ", ""))
