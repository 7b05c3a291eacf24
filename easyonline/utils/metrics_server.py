"""One ``/metrics`` endpoint for a prometheus_client collector: the trainer's and the eval job's ``--metrics_port``.

The collector (an object with ``collect()``) is asked at each scrape; a port
that cannot be bound is a ConfigError naming the flag (exit code 2).
"""
from typing import Dict, Iterator, Optional

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric

from easyonline.core.errors import ConfigError


class MetricsServer:
    """Serves ``collector`` on ``http://host:port/metrics`` until ``close``; ``port`` is the bound one (0: free)."""

    def __init__(self, collector, port: int, host: str = "127.0.0.1"):
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        try:
            self._server, _ = start_http_server(port, addr=host, registry=registry)
        except OSError as e:
            raise ConfigError("", f"--metrics_port {port} on {host}: {e.strerror or e}") from e
        self.port = self._server.server_port

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


#: every figure a task may have (train/task_figures.py, eval/evaluator.py), as a gauge with a ``task`` label
TASK_FIGURES = (("auc", "AUC of a binary task"),
                ("logloss", "logloss of a binary task"),
                ("ctr", "share of positive labels of a binary task"),
                ("gauc", "AUC within each user's samples, averaged, of a binary task (eval_config's gauc)"),
                ("session_auc", "AUC within each session's samples, averaged, of a binary task"),
                ("mse", "mean squared error of a regression task"),
                ("label_mean", "mean label of a regression task"))


def task_gauges(prefix: str, tasks: Dict[str, Dict[str, Optional[float]]]) -> Iterator[Metric]:
    """``<prefix>task_<figure>{task="<name>"}`` of every task that has the figure (a value, not None)."""
    for figure, help_text in TASK_FIGURES:
        family = GaugeMetricFamily(prefix + "task_" + figure, help_text, labels=["task"])
        for task, figures in tasks.items():
            value = figures.get(figure)
            if value is not None:
                family.add_metric([task], float(value))
        if family.samples:
            yield family
