#!/usr/bin/env bash
# Set up (if needed) and run the main job on the embedded default; extra arguments go to
# `spotlight train` (e.g. --iterations 5 --out runs/try).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${SPOTLIGHT_VENV:-.venv}/bin/spotlight" train "$@"
