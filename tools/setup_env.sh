#!/usr/bin/env bash
# Creates .venv (Python 3.11) with the pinned stack and easyonline installed in it.
# Idempotent: reinstalls only when requirements*.txt or setup.py changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then PY=$candidate; break; fi
  done
fi
"$PY" - <<'PYCHECK'
import sys
if sys.version_info[:2] != (3, 11):
    sys.exit(f"easyonline's pinned stack (TensorFlow 2.16 + TFRA 0.8.1) needs Python 3.11, found {sys.version.split()[0]}")
PYCHECK
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.easyonline-installed
want=$(cat requirements.txt requirements-dev.txt setup.py | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements-dev.txt
  .venv/bin/python -m pip install -q --no-deps -e .
  echo "$want" > "$stamp"
fi
