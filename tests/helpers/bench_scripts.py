"""A bench script's own functions, for the unit tests that check them by hand.

tools/bench/ holds leaf scripts, not a package: no test imports ``tools.bench``, and what tests and benches
share lives in the installed package. A script's own arithmetic (history_signals.py's statistics,
sequence_quality.py's saved scores) is checked by loading the script's file as ``python <script>`` would,
without running its main (``runpy``), and taking the functions it defined.
"""
import os
import runpy
from typing import Any, Dict

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tools", "bench")


def bench_script(name: str) -> Dict[str, Any]:
    """The names tools/bench/<name>.py defines, its ``__main__`` block not run."""
    return runpy.run_path(os.path.join(BENCH, f"{name}.py"), run_name=f"bench_script_{name}")
