#!/usr/bin/env bash
# The main job: sets up .venv, starts the local broker, streams a drifting CTR
# stream, trains DeepFM online and prints a summary. Extra args go to the demo
# (python -m easyonline.tools.demo --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup_env.sh
exec .venv/bin/python -m easyonline.tools.demo "$@"
