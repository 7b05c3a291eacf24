#!/usr/bin/env bash
# Creates .venv (Python 3.11) with the pinned stack and easyonline installed in it.
# Idempotent: reinstalls only when requirements*.txt, setup.py or the C sources changed.
# The install compiles easyonline's C input decoders (needs gcc and Python's headers);
# without them it still succeeds and the same work runs in Python, slower.
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
want=$(cat requirements.txt requirements-dev.txt setup.py pyproject.toml easyonline/*/*.c | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements-dev.txt
  # (setuptools warns about every editable install: shown only when the install fails)
  if ! .venv/bin/python -m pip install -q --no-deps -e . > .venv/install-easyonline.log 2>&1; then
    cat .venv/install-easyonline.log >&2
    exit 1
  fi
  echo "$want" > "$stamp"
  .venv/bin/python -c "import easyonline.features._csv_decoder, easyonline.inputs._record_decoder" 2>/dev/null \
    || echo "setup_env: easyonline's C input decoders were not compiled (is gcc installed?);" \
            "training works, with more input CPU per sample (docs/operations.md, 'The input path')" >&2
fi
