#!/usr/bin/env bash
# Set up (if needed), lint, and run the test suite; extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV=${SPOTLIGHT_VENV:-.venv}
export RAY_USAGE_STATS_ENABLED=0
echo "[test] ruff"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
echo "[test] pytest"
exec "$VENV/bin/pytest" "$@"
