#!/usr/bin/env bash
# Linter and type checker (run by tools/run_tests.sh, so by CI): ruff on the whole tree (ruff.toml),
# import order and mypy (mypy.ini) on the ground floor (core) and the update protocol (updates).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check easyonline tests tools
.venv/bin/ruff check --select I easyonline/core easyonline/updates
.venv/bin/mypy easyonline/core easyonline/updates
