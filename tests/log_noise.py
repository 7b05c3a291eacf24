"""Finds the log lines of a command's output that are marked E or WARNING and are not easyonline's own.

A line so marked must mean something to the operator: TensorFlow's, TFRA's and kafka-python's start-up and
connection noise is dropped where it is made (easyonline/core/quiet_libraries.py, utils/kafka_outages.py).
The forms looked for: TensorFlow's C++ log (``2026-01-01 10:00:00.123456: E external/...``), Python's default
format (``WARNING:tensorflow:...``, as TensorFlow's own handler prints), easyonline's format naming another
logger (``2026-01-01 10:00:00,123 E kafka.net.manager] ...``; easyonline's tools run as ``__main__`` are ours), and TFRA's import print.
"""
import re
from typing import Iterable, List

_MARKED = re.compile(r"^(?:\S+ \S+: [EWF] |(?:WARNING|ERROR|CRITICAL):\S+:|\S+ \S+ [EWC] (?!easyonline|__main__\])\S+\] )")
_PRINTS = ("_SingleDeviceSaver removed after tf version",)


def foreign_lines(text: str, allowed: Iterable[str] = ()) -> List[str]:
    """The lines of ``text`` marked E/W (or F/C) by a library, or printed by TFRA at import, minus those
    containing one of ``allowed``."""
    allowed = tuple(allowed)
    return [line for line in text.splitlines()
            if (_MARKED.match(line) or any(p in line for p in _PRINTS)) and not any(a in line for a in allowed)]
