#!/usr/bin/env bash
# Linter and type checker (run by tools/run_tests.sh, so by CI): ruff on the whole tree (ruff.toml),
# import order on the ground floor (core) and the update protocol (updates), and mypy (mypy.ini) on those and on
# the packages whose contracts the trainer and its callbacks use (train, distributed, publish, inputs, models), and
# movielens (the sample sequences a user builds with tools.movielens_sequences).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check easyonline tests tools
.venv/bin/ruff check --select I easyonline/core easyonline/updates
.venv/bin/mypy easyonline/core easyonline/updates easyonline/train easyonline/distributed easyonline/publish \
    easyonline/inputs easyonline/models easyonline/tasks easyonline/movielens
