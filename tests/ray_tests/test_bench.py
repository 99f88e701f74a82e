"""`spotlight bench exploration` on Ray: runs that stop at the target, one Ray for all runs (the
report, its reuse and refusals: tests/unit/test_bench_config.py, with the local runner)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_bench_runs_stop_at_the_target(local_ray, tmp_path):
    from spotlight.cli import main

    args = ["bench", "exploration", "--recipe", "tiny-smoke", "--iterations", "4",
            "--val-every", "2", "--seeds", "0", "--modes", "off", "spot", "--target-delta",
            "-1", "--stop-at-target", "--out", str(tmp_path)]  # fmt: skip
    assert main(args) == 0  # the second run needs the trainer the first one stopped early
    doc = json.loads((tmp_path / "exploration.json").read_text())
    for mode in ("off", "spot"):
        summary = json.loads((tmp_path / f"runs/{mode}-seed0/summary.json").read_text())
        assert summary["stopped"] == "target" and summary["num_iterations"] == 2
        assert doc["modes"][mode]["iterations_to_target_median"] == 2
