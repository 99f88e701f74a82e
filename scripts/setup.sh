#!/usr/bin/env bash
# Idempotent setup for a fresh Debian/Ubuntu machine: OS packages, .venv, this package (+dev tools).
#
# Environment:
#   PYTHON=python3.12        interpreter to build the venv from (>= pyproject.toml's requires-python,
#                            3.11; default: python3 when it is new enough, else the first of
#                            python3.13, python3.12, python3.11 on PATH). Only used to create the venv
#   SPOTLIGHT_VENV=path      venv location (default .venv in the repo)
#   SPOTLIGHT_TORCH=cpu|gpu  cpu (default): install the torch pinned in requirements/torch-cpu.txt
#                            first; on a machine without an NVIDIA GPU (no working nvidia-smi) from
#                            PyTorch's CPU wheel index when it answers within 5 s (a CPU build, no
#                            CUDA download), else from the default index. gpu: leave torch to pip (the
#                            default PyPI wheel on Linux x86_64 is a CUDA build), see docs/install.md
#   SPOTLIGHT_TORCH_INDEX=url  extra index for the pinned torch, used instead of the choice above
#   SPOTLIGHT_EXTRAS=dev,aws   the package's extras to install (default dev: pytest, ruff); cluster
#                            nodes add aws (boto3, which Ray's AWS autoscaler imports on the head)
#   SPOTLIGHT_SETUP_DRY_RUN=1  print the commands that would change the machine (apt-get, venv, pip)
#                            instead of running them; the checks (Python, GPU, index probe) still run
#
# The last line says which torch build is installed (e.g. 2.13.0+cpu) and whether CUDA is available.
# A stamp in the venv (a hash of pyproject.toml and the torch pin) makes a rerun a no-op.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${SPOTLIGHT_VENV:-.venv}
TORCH_MODE=${SPOTLIGHT_TORCH:-cpu}
DRY_RUN=${SPOTLIGHT_SETUP_DRY_RUN:-0}
EXTRAS=${SPOTLIGHT_EXTRAS:-dev}
CPU_INDEX=https://download.pytorch.org/whl/cpu
# The oldest supported Python, from pyproject.toml (requires-python = ">=3.11").
MIN_PY=$(sed -n 's/^requires-python *= *">= *\([0-9]*\.[0-9]*\)".*/\1/p' pyproject.toml)
MIN_PY=${MIN_PY:-3.11}
NEWER_PYTHONS=(python3.13 python3.12 python3.11) # all dependencies (tesserocr too) have wheels

log() { echo "[setup] $*" >&2; }
die() { echo "[setup] error: $*" >&2; exit 1; }
dry_run() { [[ $DRY_RUN != 0 && -n $DRY_RUN ]]; }
run() { # a command that changes the machine: only printed in a dry run
  if dry_run; then
    local cmd
    printf -v cmd '%q ' "$@"
    log "dry run: ${cmd% }"
  else
    "$@"
  fi
}

[[ $TORCH_MODE == cpu || $TORCH_MODE == gpu ]] || die "SPOTLIGHT_TORCH=$TORCH_MODE: use cpu or gpu"
[[ $EXTRAS =~ ^[a-z]+(,[a-z]+)*$ ]] || die "SPOTLIGHT_EXTRAS=$EXTRAS: a comma-separated list like dev,aws"

apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    die "missing OS packages: $* -- no apt-get here; install them with your package manager"
  fi
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 \
      || die "missing OS packages: $* -- run as root or install them: apt-get install $*"
    sudo=(sudo)
  fi
  log "installing OS packages: $*"
  if ! { run "${sudo[@]}" apt-get update -qq >/dev/null \
    && run "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }; then
    die "apt-get install $* failed; install them by hand and rerun"
  fi
}

py_ok() { # py_ok INTERPRETER: it runs (a pyenv shim may not) and is >= MIN_PY
  "$1" -c 'import sys; sys.exit(sys.version_info[:2] < tuple(map(int, sys.argv[1].split("."))))' \
    "$MIN_PY" >/dev/null 2>&1
}
py_version() { # py_version INTERPRETER: "Python 3.10.12", or why there is none
  local out
  command -v "$1" >/dev/null 2>&1 || { echo "missing"; return; }
  if out=$("$1" --version 2>&1); then
    echo "${out%%$'\n'*}"
  else
    echo "not a working interpreter (${out%%$'\n'*})"
  fi
}
pick_python() { # the first good interpreter of python3, python3.13, python3.12, python3.11; or none
  local c
  for c in python3 "${NEWER_PYTHONS[@]}"; do
    if command -v "$c" >/dev/null 2>&1 && py_ok "$c"; then
      echo "$c"
      return
    fi
  done
}
no_python() { # no_python WHAT-WAS-FOUND: stop, saying what to install
  die "$1.
Spotlight needs Python >= $MIN_PY (requires-python in pyproject.toml): CPython 3.11, 3.12 or
3.13, for which all of its dependencies have wheels. This script installs no Python; install one:
  Ubuntu 22.04 (universe), or any release that packages python3.11:
    sudo apt-get install python3.11 python3.11-venv
  Ubuntu 20.04 or 22.04, a current 3.11 from the deadsnakes PPA:
    sudo add-apt-repository ppa:deadsnakes/ppa && sudo apt-get update
    sudo apt-get install python3.11 python3.11-venv
  elsewhere: CPython 3.11-3.13 from python.org or pyenv
then rerun with it:
  PYTHON=python3.11 bash scripts/setup.sh"
}

# 1. OS packages: a Python >= 3.11 with venv (only to create the venv), and Tesseract (the OCR
#    reward's engine).
if [[ -x $VENV/bin/python ]]; then
  py_ok "$VENV/bin/python" || die "$VENV has $(py_version "$VENV/bin/python");" \
    "Spotlight needs Python >= $MIN_PY: delete $VENV and rerun"
  PY=
elif [[ -n ${PYTHON:-} ]]; then
  PY=$PYTHON
  command -v "$PY" >/dev/null 2>&1 || no_python "PYTHON=$PY: no such command"
  py_ok "$PY" || no_python "PYTHON=$PY is $(py_version "$PY")"
else
  if ! command -v python3 >/dev/null 2>&1 && [[ -z $(pick_python) ]]; then
    apt_install python3 python3-venv
  fi
  PY=$(pick_python)
  if [[ -z $PY ]]; then
    others=$(printf '%s, ' "${NEWER_PYTHONS[@]}")
    no_python "python3 is $(py_version python3), and none of ${others%, } is here and works"
  elif [[ $PY != python3 ]]; then
    log "python3 is $(py_version python3): using $PY ($(py_version "$PY"))"
  fi
fi
if [[ -n $PY ]] && ! "$PY" -c 'import ensurepip, venv' 2>/dev/null; then
  apt_install "python$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv"
fi
missing=()
command -v tesseract >/dev/null 2>&1 || missing+=(tesseract-ocr)
((${#missing[@]} == 0)) || apt_install "${missing[@]}"

# 2. The virtual environment and the package, skipped when nothing changed since the last run.
stamp=$(cat pyproject.toml requirements/torch-cpu.txt | sha256sum | cut -c1-16)-$TORCH_MODE-$EXTRAS
if [[ -x $VENV/bin/spotlight && -f $VENV/.spotlight-stamp && $(<"$VENV/.spotlight-stamp") == "$stamp" ]]; then
  dry_run && log "dry run: $VENV is up to date (its stamp matches); nothing to do"
  exit 0
fi
[[ -x $VENV/bin/python ]] || { log "creating $VENV with $PY"; run "$PY" -m venv "$VENV"; }
pip_quiet() { # this workplace's pip config prints a warning per package; keep real errors
  if dry_run; then
    run "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@"
    return
  fi
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@" 2>&1 \
    | { grep -v '^WARNING: Location' || true; }
  return "${PIPESTATUS[0]}"
}
has_nvidia_gpu() { # nvidia-smi exists and lists a GPU
  command -v nvidia-smi >/dev/null 2>&1 || return 1
  if command -v timeout >/dev/null 2>&1; then
    timeout 10 nvidia-smi -L >/dev/null 2>&1
  else
    nvidia-smi -L >/dev/null 2>&1
  fi
}
answers() { # answers URL: an HTTP HEAD request succeeds within 5 s
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --head -m 5 -o /dev/null "$1" 2>/dev/null
  else
    "${PY:-$VENV/bin/python}" -c 'import sys, urllib.request as u
u.urlopen(u.Request(sys.argv[1], method="HEAD"), timeout=5)' "$1" >/dev/null 2>&1
  fi
}
if [[ $TORCH_MODE == cpu ]]; then
  pin=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' requirements/torch-cpu.txt)
  if [[ -n ${SPOTLIGHT_TORCH_INDEX:-} ]]; then
    log "installing $pin with the extra index $SPOTLIGHT_TORCH_INDEX (SPOTLIGHT_TORCH_INDEX)"
    pip_quiet -r requirements/torch-cpu.txt --extra-index-url "$SPOTLIGHT_TORCH_INDEX" \
      || die "torch install failed"
  elif has_nvidia_gpu; then
    log "nvidia-smi lists a GPU: installing $pin from the default index (a CUDA build on Linux" \
      "x86_64; SPOTLIGHT_TORCH_INDEX=$CPU_INDEX would install the CPU build)"
    pip_quiet -r requirements/torch-cpu.txt || die "torch install failed"
  elif answers "$CPU_INDEX/"; then
    log "no GPU: installing the CPU build of $pin from PyTorch's CPU wheel index ($CPU_INDEX)"
    if ! pip_quiet -r requirements/torch-cpu.txt --index-url "$CPU_INDEX" --timeout 10; then
      log "that failed: installing $pin from the default index instead"
      pip_quiet -r requirements/torch-cpu.txt || die "torch install failed"
    fi
  else
    log "no GPU, but PyTorch's CPU wheel index ($CPU_INDEX) does not answer: installing $pin" \
      "from the default index (set SPOTLIGHT_TORCH_INDEX to a CPU wheel index you can reach)"
    pip_quiet -r requirements/torch-cpu.txt || die "torch install failed"
  fi
fi
log "installing spotlight and its dependencies into $VENV (a few minutes the first time)"
pip_quiet -e ".[$EXTRAS]" || die "pip install -e .[$EXTRAS] failed"
if dry_run; then
  log "dry run: nothing was installed"
  exit 0
fi
ready=$("$VENV/bin/python" -c '
import diffusers, ray, torch
v = torch.version
build = f"CUDA {v.cuda} build" if v.cuda else f"ROCm {v.hip} build" if getattr(v, "hip", None) else "CPU build"
cuda = "yes" if torch.cuda.is_available() else "no"
print(f"torch {torch.__version__} ({build}, CUDA available: {cuda}), ray {ray.__version__},"
      f" diffusers {diffusers.__version__}")
') || die "the installed packages do not import (see above); delete $VENV and rerun"
echo "$stamp" >"$VENV/.spotlight-stamp"
log "ready: $ready"
