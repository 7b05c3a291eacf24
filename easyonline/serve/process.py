"""Starts ``python -m easyonline.serve`` as a child process on 127.0.0.1 and talks to it over HTTP.

For tests, benchmarks and tools, as LocalBroker is for the broker: the
server runs in its own process, as in production (TFRA's inference mode is
process-wide), and is stopped with SIGTERM.
"""
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from easyonline.utils import preloaded_python
from easyonline.utils.net import free_port


class ServingProcess:
    def __init__(self, export_dir: str, log_path: str, *flags: str, model_name: str = "",
                 start_timeout: float = 120.0, env: Optional[Dict[str, str]] = None,
                 ssl_context: Optional[ssl.SSLContext] = None):
        """``ssl_context``: the server runs with TLS (--tls_* flags): talk HTTPS with this client context."""
        self.port = free_port()
        self._ssl = ssl_context
        self.model_name = model_name
        self._log = open(log_path, "ab")
        self._log_path = log_path
        self.proc = preloaded_python.Popen([sys.executable, "-m", "easyonline.serve", f"--export_dir={export_dir}",
                                            f"--port={self.port}", *flags], env=env or dict(os.environ),
                                           stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.time() + start_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with self._open(self.url("/metrics"), timeout=5):
                    pass
            except OSError:
                time.sleep(0.3)
                continue
            # The URL name defaults to the export's model name, which the server prints at start.
            self.model_name = self.model_name or self.log_tail(100000).split("serving ", 1)[1].split(" ", 1)[0]
            return
        self.stop()
        raise TimeoutError(f"the server did not answer within {start_timeout:.0f} s: {self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        with open(self._log_path, errors="replace") as f:
            return f.read()[-chars:]

    def url(self, path: str) -> str:
        return f"{'https' if self._ssl else 'http'}://127.0.0.1:{self.port}{path}"

    def _open(self, request, timeout: float):
        return urllib.request.urlopen(request, timeout=timeout, context=self._ssl)

    def status(self, name: str = "") -> dict:
        with self._open(self.url(f"/v1/models/{name or self.model_name}"), timeout=10) as r:
            return json.loads(r.read())

    def post(self, body: bytes, name: str = "") -> Tuple[int, dict]:
        """(HTTP status, decoded JSON body) of a predict request."""
        request = urllib.request.Request(self.url(f"/v1/models/{name or self.model_name}:predict"), data=body,
                                         method="POST")
        try:
            with self._open(request, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def predict_outputs(self, rows: List[dict]) -> Dict[str, np.ndarray]:
        """Every output the server answers for TF Serving "instances" rows, by name; raises on any error."""
        code, body = self.post(json.dumps({"instances": rows}).encode())
        if code != 200:
            raise RuntimeError(f"predict answered {code}: {body}")
        predictions = body["predictions"]
        return {name: np.array([p[name] for p in predictions]) for name in predictions[0]}

    def predict(self, rows: List[dict], output: str = "") -> np.ndarray:
        """One output for "instances" rows: ``output``, or else the single task's ``probs`` (or ``y`` of a
        regression); a multi-task model's answer needs the output named (``probs_<tower>``...)."""
        outputs = self.predict_outputs(rows)
        name = output or next((n for n in ("probs", "y") if n in outputs), "")
        if name not in outputs:
            raise KeyError(f"the server answers outputs {sorted(outputs)}; name one (output=...)")
        return outputs[name]

    def wait_for(self, condition: Callable[[dict], bool], timeout: float = 90) -> dict:
        """Polls the status until ``condition(status)``; the status that met it."""
        deadline = time.time() + timeout
        status = {}
        while time.time() < deadline:
            status = self.status()
            if condition(status):
                return status
            time.sleep(0.2)
        raise TimeoutError(f"condition not met within {timeout:.0f} s; last status {status}")

    def kill(self) -> int:
        """SIGKILL, as a host or pod lost at the worst moment; the exit code (-9)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def stop(self) -> int:
        """SIGTERM, then the exit code (killed after 30 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode
