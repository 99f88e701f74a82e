#!/usr/bin/env bash
# Idempotent setup for a fresh Debian/Ubuntu machine: OS packages, .venv, this package (+dev tools).
#
# Environment:
#   PYTHON=python3.12        interpreter to build the venv from (>= 3.11; default python3)
#   SPOTLIGHT_VENV=path      venv location (default .venv in the repo)
#   SPOTLIGHT_TORCH=cpu|gpu  cpu (default): install the CPU torch pinned in requirements/torch-cpu.txt
#                            first; gpu: leave torch to pip (the default PyPI wheel on Linux x86_64 is
#                            a CUDA build), see docs/install.md
#   SPOTLIGHT_TORCH_INDEX=url  extra index for the CPU torch wheel (PyTorch's CPU wheel index) on
#                            machines where the plain pin would fetch a CUDA build
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=${SPOTLIGHT_VENV:-.venv}
TORCH_MODE=${SPOTLIGHT_TORCH:-cpu}

log() { echo "[setup] $*" >&2; }
die() { echo "[setup] error: $*" >&2; exit 1; }

apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    die "missing OS packages: $* -- no apt-get here; install them with your package manager"
  fi
  local sudo=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 \
      || die "missing OS packages: $* -- run as root or install them: apt-get install $*"
    sudo="sudo"
  fi
  log "installing OS packages: $*"
  $sudo apt-get update -qq >/dev/null \
    && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" \
      >/dev/null \
    || die "apt-get install $* failed; install them by hand and rerun"
}

# 1. OS packages: a Python >= 3.11 with venv, and Tesseract (the OCR reward's engine).
command -v "$PY" >/dev/null 2>&1 || apt_install python3 python3-venv
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die "$("$PY" --version 2>&1) is too old: Spotlight needs Python >= 3.11 (set PYTHON=...)"
"$PY" -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
missing=()
command -v tesseract >/dev/null 2>&1 || missing+=(tesseract-ocr)
((${#missing[@]} == 0)) || apt_install "${missing[@]}"

# 2. The virtual environment and the package, skipped when nothing changed since the last run.
stamp=$(cat pyproject.toml requirements/torch-cpu.txt | sha256sum | cut -c1-16)-$TORCH_MODE
if [[ -x $VENV/bin/spotlight && -f $VENV/.spotlight-stamp && $(<"$VENV/.spotlight-stamp") == "$stamp" ]]; then
  exit 0
fi
[[ -x $VENV/bin/python ]] || { log "creating $VENV"; "$PY" -m venv "$VENV"; }
pip_quiet() {  # this workplace's pip config prints a warning per package; keep real errors
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@" 2>&1 \
    | { grep -v '^WARNING: Location' || true; }
  return "${PIPESTATUS[0]}"
}
if [[ $TORCH_MODE == cpu ]]; then
  log "installing the CPU build of torch ($(<requirements/torch-cpu.txt))"
  pip_quiet -r requirements/torch-cpu.txt ${SPOTLIGHT_TORCH_INDEX:+--extra-index-url "$SPOTLIGHT_TORCH_INDEX"} \
    || die "torch install failed"
fi
log "installing spotlight and its dependencies into $VENV (a few minutes the first time)"
pip_quiet -e ".[dev]" || die "pip install -e .[dev] failed"
echo "$stamp" >"$VENV/.spotlight-stamp"
log "ready: $("$VENV/bin/python" -c 'import torch, ray, diffusers; print(f"torch {torch.__version__}, ray {ray.__version__}, diffusers {diffusers.__version__}")')"
