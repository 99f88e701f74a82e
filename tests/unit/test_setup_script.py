"""scripts/setup.sh in its dry run: what it would install, and the extras it refuses."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .conftest import REAL_SLEEP

SETUP = Path(__file__).resolve().parents[2] / "scripts" / "setup.sh"


def dry_run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    full = {
        **os.environ,
        "SPOTLIGHT_SETUP_DRY_RUN": "1",
        "SPOTLIGHT_VENV": str(tmp_path / "venv"),  # a venv that does not exist yet
        "SPOTLIGHT_TORCH_INDEX": "https://example.invalid/simple",  # no index probe
        **env,
    }
    return subprocess.run(
        ["bash", str(SETUP)], capture_output=True, text=True, env=full, timeout=120
    )


def test_cluster_nodes_install_the_aws_extra(tmp_path, monkeypatch):
    monkeypatch.setattr("time.sleep", REAL_SLEEP)  # subprocess.run(timeout=) polls with sleep
    out = dry_run(tmp_path, SPOTLIGHT_EXTRAS="dev,aws")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "-e .\\[dev\\,aws\\]" in out.stderr  # printf %q quoting of .[dev,aws]
    default = dry_run(tmp_path)
    assert "-e .\\[dev\\]" in default.stderr and "aws" not in default.stderr.split("-e ")[-1]


def test_extras_that_are_not_a_plain_list_are_refused_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.setattr("time.sleep", REAL_SLEEP)
    out = dry_run(tmp_path, SPOTLIGHT_EXTRAS="dev;rm -rf x")
    assert out.returncode == 1
    assert "SPOTLIGHT_EXTRAS=dev;rm -rf x: a comma-separated list like dev,aws" in out.stderr
    assert "dry run:" not in out.stderr
