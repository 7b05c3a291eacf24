#!/usr/bin/env bash
# The test suite: sets up .venv, runs the linter and type checker (tools/lint.sh), then pytest over
# tests/unit and tests/integration (they start the local broker, and Apache Kafka, themselves).
#
# Without arguments the files run as TEST_SHARDS (default 3) pytest processes side by side, split by
# measured time (tools/test_shards.py). A test keeps about one core busy but also waits (for the broker, a
# child process, a checkpoint), so two shards left CI's 2 cores 16% idle (168% CPU); three keep them
# busy: 1,134 s for three on this machine (2026-11-27) against 1,413-1,508 s for two the day before.
# Each shard's output is printed when it ends; the suite fails if any shard fails.
# With arguments (or TEST_SHARDS=1) one pytest runs them as given.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup_env.sh
# Apache Kafka's jars (tests of Kafka behaviour run against it): resolved with Maven once, then offline
.venv/bin/python -m easyonline.tools.apache_kafka --install >/dev/null
bash tools/lint.sh
# Bytecode once, here: with PYTHONDONTWRITEBYTECODE set (CI's images and this sandbox set it) no process
# writes .pyc files, so each of the suite's hundreds of Python processes compiled the package's ~250 modules
# again: ~0.8 s of CPU per process importing the trainer (compileall writes them whatever the variable says).
.venv/bin/python -m compileall -q easyonline tests tools >/dev/null
PYTEST=(.venv/bin/python -m pytest -q -p no:cacheprovider)
SHARDS=${TEST_SHARDS:-3}
if [ "$#" -gt 0 ] || [ "$SHARDS" -le 1 ]; then
  exec "${PYTEST[@]}" tests/unit tests/integration "$@"
fi
results=$(mktemp -d)
started=$SECONDS
pids=()
for ((i = 0; i < SHARDS; i++)); do
  # shellcheck disable=SC2207
  files=($(.venv/bin/python tools/test_shards.py --shards "$SHARDS" --index "$i"))
  "${PYTEST[@]}" --junitxml="$results/shard-$i.xml" "${files[@]}" >"$results/shard-$i.log" 2>&1 &
  pids+=($!)
done
status=0
for ((i = 0; i < SHARDS; i++)); do
  code=0
  wait "${pids[$i]}" || code=$?
  echo "=== shard $((i + 1)) of $SHARDS (exit $code) ==="
  cat "$results/shard-$i.log"
  [ "$code" -eq 0 ] || status=$code
done
echo "=== $SHARDS shards in $((SECONDS - started)) s; exit $status (per-file seconds: python tools/test_shards.py --update $results/shard-*.xml) ==="
exit "$status"
