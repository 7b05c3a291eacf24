#!/usr/bin/env bash
# The test suite: sets up .venv, then runs pytest (tests start the local broker themselves).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup_env.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider tests "$@"
