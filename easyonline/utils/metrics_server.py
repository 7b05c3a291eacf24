"""One ``/metrics`` endpoint for a prometheus_client collector: the trainer's and the eval job's ``--metrics_port``.

The collector (an object with ``collect()``) is asked at each scrape; a port
that cannot be bound is a ConfigError naming the flag (exit code 2).
"""
from prometheus_client import CollectorRegistry, start_http_server

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
