"""The serving processor's periodic log lines: the status, and the update broker's outage in one line.

Once per ``--status_secs`` the server logs its status; the update lag reads
``lag=unknown`` when it is not known (no fetch has said where the topic ends,
or the broker is unreachable now), never ``lag=None msgs/Nones``. While the
update broker is unreachable it also logs, once per period, one WARNING
saying which broker, for how long and why (kafka-python's own connection
errors are folded into it: utils/kafka_outages.py).
"""
from typing import Optional

from easyonline.updates.transport import KAFKA
from easyonline.utils import kafka_outages


def broker_outage(follower) -> Optional[str]:
    """"update broker HOST:PORT unreachable for N s (reason)" while the follower's Kafka broker is, else None."""
    location = follower.location
    if location is None or location.storage != KAFKA:
        return None
    outage = kafka_outages.outage()
    if outage is None:
        return None
    seconds, reason = outage
    return f"update broker {location.server} unreachable for {seconds:.0f} s ({reason})"


def lag_text(status: dict, unreachable: bool) -> str:
    """``12 msgs/3.4s``, ``0 msgs/unknown`` when only the messages are known, ``unknown`` when nothing is."""
    messages, seconds = status["update_lag_messages"], status["update_lag_seconds"]
    if unreachable or (messages is None and seconds is None):
        return "unknown"
    return (f"{'unknown' if messages is None else messages} msgs/"
            f"{'unknown' if seconds is None else f'{seconds}s'}")


def status_line(status: dict, requests: dict, outage: Optional[str]) -> str:
    """The periodic status line from ``ServingState.status()`` and the request counters."""
    return (f"step={status['last_applied_step']} seq={status['last_applied_sequence']} "
            f"applied={status['applied_updates']} skipped={status['skipped_updates']} "
            f"refused={status['refused_updates']} lag={lag_text(status, outage is not None)} requests={requests}")
