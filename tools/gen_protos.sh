#!/usr/bin/env bash
# Regenerates easyonline/protos/*_pb2.py from protos/ (run after editing a .proto).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
"$PY" -m grpc_tools.protoc -Iprotos --python_out=. protos/easyonline/protos/*.proto
