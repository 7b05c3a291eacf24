#!/usr/bin/env bash
# The test suite: sets up .venv, runs the linter and type checker (tools/lint.sh), then pytest:
# tests/unit (no broker, seconds) first, then tests/integration (they start the local broker themselves).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup_env.sh
bash tools/lint.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider tests/unit tests/integration "$@"
