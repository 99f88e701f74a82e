"""What a user's terminal shows for a run on a local Ray: the project's lines, not Ray's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

PROJECT_LINE = ("[spotlight]", "[iter ", "  ")  # its own lines, its iteration and status lines


def test_a_local_run_prints_only_the_project_s_lines_and_ray_s_go_to_ray_log(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "spotlight.cli", "train", "--recipe", "tiny-smoke"]
    cmd += ["--iterations", "2", "--trainer-threads", "1", "--no-wandb", "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_AUTH_MODE="disabled", PYTHONUNBUFFERED="1")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    terminal = (proc.stdout + proc.stderr).splitlines()
    assert proc.returncode == 0, "\n".join(terminal[-40:])
    foreign = [x for x in terminal if x.strip() and not x.startswith(PROJECT_LINE)]
    assert foreign == [], foreign
    assert not any("pid=" in x for x in terminal)  # no forwarded worker line
    assert sum(x.startswith("[iter ") for x in terminal) == 2
    ray_log = (out / "ray.log").read_text()
    assert "Started a local Ray instance" in ray_log  # the driver's Ray logger
    assert "(TrainController pid=" in ray_log  # forwarded worker output
    # The cause of the noise: Ray Train's cleaner polls the State API, which needs the dashboard.
    # With another local Ray up (another test's, in the other pytest process) the cleaner's
    # State API client may join that one instead, Ray's "latest cluster" rule, and fail there:
    # that says nothing of this run's dashboard.
    if "Found multiple active Ray instances" not in ray_log:
        assert "Failed to query Ray Train Controller actor state" not in ray_log
