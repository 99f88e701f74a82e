#!/usr/bin/env bash
# Set up (if needed), lint, and run the test suite; extra arguments go to pytest.
#   SPOTLIGHT_TEST_WORKERS=N   pytest processes for the Ray and distributed tests (default 2;
#                              0: the whole suite in one process, no pytest-xdist).
# With no arguments, the suite runs as two pytest commands at once: tests/ray_tests and
# tests/dist_tests in N processes, each test file whole in one of them (its local Ray is
# started once); tests/unit and tests/gpu in one more process at a lower CPU priority
# (nice 10), so that it takes the CPU time the Ray tests' waits leave and not the time their
# Ray daemons need. Its output follows theirs. With arguments (`-k sampler`, a path), one
# pytest command runs them in N processes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV=${SPOTLIGHT_VENV:-.venv}
export RAY_USAGE_STATS_ENABLED=0
echo "[test] ruff"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
WORKERS=${SPOTLIGHT_TEST_WORKERS:-2}
[[ $WORKERS =~ ^[0-9]+$ ]] || { echo "SPOTLIGHT_TEST_WORKERS=$WORKERS: a number" >&2; exit 2; }
if ((WORKERS == 0)); then
  echo "[test] pytest"
  exec "$VENV/bin/pytest" "$@"
fi
if (($# > 0)); then
  echo "[test] pytest"
  exec "$VENV/bin/pytest" -n "$WORKERS" --dist loadfile "$@"
fi

LOG=$(mktemp -t spotlight-unit-tests.XXXXXX)
nice -n 10 "$VENV/bin/pytest" -p no:cacheprovider tests/unit tests/gpu > "$LOG" 2>&1 &
UNIT=$!
trap 'kill "$UNIT" 2>/dev/null || true; rm -f "$LOG"' EXIT
trap 'exit 130' INT TERM # Ctrl-C: stop both (the background pytest does not get the SIGINT)
echo "[test] pytest tests/unit tests/gpu (one process, nice 10; its output follows)"
echo "[test] pytest tests/ray_tests tests/dist_tests ($WORKERS processes)"
RAY_RC=0
"$VENV/bin/pytest" -n "$WORKERS" --dist loadfile tests/ray_tests tests/dist_tests || RAY_RC=$?
UNIT_RC=0
wait "$UNIT" || UNIT_RC=$?
echo "[test] pytest tests/unit tests/gpu"
cat "$LOG"
echo "[test] exit codes: ray and distributed tests $RAY_RC, unit and GPU tests $UNIT_RC"
((RAY_RC == 0 && UNIT_RC == 0))
