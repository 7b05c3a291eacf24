"""Loopback networking helpers for tools and tests."""
import os
import random
import socket
import time
from typing import Callable, Optional

# Not the module's shared generator: tests seed ``random``, and two processes seeded alike would pick alike
# (so is a forked child, whose generator is reseeded: see _ports).
_PORTS = random.Random(os.urandom(16))
_PORTS_PID = os.getpid()


def _ports() -> random.Random:
    global _PORTS, _PORTS_PID  # pylint: disable=global-statement
    if _PORTS_PID != os.getpid():
        _PORTS, _PORTS_PID = random.Random(os.urandom(16)), os.getpid()
    return _PORTS


def ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (the local ports outgoing connections get)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on, below the kernel's ephemeral range when there is room there.

    A port the kernel handed out (bind to 0) is an ephemeral one: between this call and the server's bind,
    any outgoing connection on the machine may take it as its local port, and the server then fails to
    bind (seen with three test shards on two cores). Ports below the range are never given to outgoing
    connections."""
    low = ephemeral_start()
    if low > 12000:
        for _ in range(50):
            port = _ports().randrange(10000, low)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for_port(host: str, port: int, timeout: float, alive: Optional[Callable[[], bool]] = None) -> bool:
    """True once something accepts connections on host:port; False after ``timeout`` seconds, or as soon as
    ``alive()`` says the process meant to listen there is gone."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            if alive is not None and not alive():
                return False
            time.sleep(0.05)
    return False
