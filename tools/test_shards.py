"""Splits the test files into shards of about equal time, for tools/run_tests.sh's parallel pytest runs.

A test keeps about one core busy (most of its time is one TensorFlow
process) and waits on the broker or a child process for the rest, so
tools/run_tests.sh runs three pytest processes over disjoint files on CI's
2 cores (two left them 16% idle). Files are assigned
greedily, longest first, by ``tests/file_seconds.json`` (seconds per file
measured on a whole run: ``--update FILE.xml...`` reads pytest's junit XML);
a file not listed counts as UNLISTED_SECONDS of its folder. Prints one
shard's files.

    python tools/test_shards.py --shards 3 --index 0
    python tools/test_shards.py --update shard-0.xml shard-1.xml
"""
import argparse
import collections
import glob
import json
import os
import sys
import xml.etree.ElementTree as ElementTree
from typing import Dict, List

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SECONDS_FILE = os.path.join(ROOT, "tests", "file_seconds.json")
UNLISTED_SECONDS = {"unit": 5.0, "integration": 30.0}  # a new file, until the next --update


def test_files() -> List[str]:
    """Every test file, relative to the repository root, unit tests first."""
    return [os.path.relpath(p, ROOT) for d in ("unit", "integration")
            for p in sorted(glob.glob(os.path.join(ROOT, "tests", d, "test_*.py")))]


def shards(files: List[str], seconds: Dict[str, float], count: int) -> List[List[str]]:
    """``files`` in ``count`` shards of about equal total seconds (longest first onto the lightest)."""
    cost = {f: seconds.get(f, UNLISTED_SECONDS["unit" if "/unit/" in f else "integration"]) for f in files}
    loads = [0.0] * count
    out: List[List[str]] = [[] for _ in range(count)]
    for f in sorted(files, key=lambda f: -cost[f]):
        lightest = loads.index(min(loads))
        out[lightest].append(f)
        loads[lightest] += cost[f]
    return [sorted(shard, key=files.index) for shard in out]


def seconds_from_junit(paths: List[str]) -> Dict[str, float]:
    """Seconds per test file from pytest's ``--junitxml`` reports (setup and teardown included)."""
    total: Dict[str, float] = collections.defaultdict(float)
    for path in paths:
        for case in ElementTree.parse(path).iter("testcase"):
            module = case.get("classname", "").split(".")
            name = "/".join(module[:3]) + ".py" if len(module) >= 3 else ""
            total[name] += float(case.get("time", 0))
    return {k: round(v, 1) for k, v in sorted(total.items()) if k}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=int, default=3, help="number of shards")
    parser.add_argument("--index", type=int, default=0, help="the shard to print (0-based)")
    parser.add_argument("--update", nargs="+", metavar="XML", help="rewrite tests/file_seconds.json from junit XML")
    args = parser.parse_args()
    if args.update:
        with open(SECONDS_FILE, "w") as f:
            json.dump(seconds_from_junit(args.update), f, indent=1)
            f.write("\n")
        return 0
    seconds = json.load(open(SECONDS_FILE)) if os.path.exists(SECONDS_FILE) else {}
    print(" ".join(shards(test_files(), seconds, args.shards)[args.index]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
