#!/usr/bin/env bash
# Set up (if needed), lint, and run the test suite; extra arguments go to pytest.
#   SPOTLIGHT_TEST_WORKERS=N   pytest processes (default 2; 0: one process, no pytest-xdist).
#                              Each test file runs whole in one process (its local Ray is
#                              started once); with 2, the Ray tests' waits overlap other work.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV=${SPOTLIGHT_VENV:-.venv}
export RAY_USAGE_STATS_ENABLED=0
echo "[test] ruff"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
echo "[test] pytest"
WORKERS=${SPOTLIGHT_TEST_WORKERS:-2}
[[ $WORKERS =~ ^[0-9]+$ ]] || { echo "SPOTLIGHT_TEST_WORKERS=$WORKERS: a number" >&2; exit 2; }
if ((WORKERS > 0)); then
  exec "$VENV/bin/pytest" -n "$WORKERS" --dist loadfile "$@"
fi
exec "$VENV/bin/pytest" "$@"
