"""`spotlight bench exploration` end to end on a tiny recipe (one Ray for all runs)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_bench_exploration_writes_its_figures(local_ray, tmp_path):
    from spotlight.cli import main

    code = main(
        ["bench", "exploration", "--recipe", "tiny-smoke", "--iterations", "2", "--val-every",
         "1", "--seeds", "0", "--modes", "off", "spot", "--target-delta", "0.0",
         "--out", str(tmp_path)]
    )  # fmt: skip
    assert code == 0
    doc = json.loads((tmp_path / "exploration.json").read_text())
    assert set(doc["modes"]) == {"off", "spot"}
    off = doc["modes"]["off"]
    (run,) = off["runs"]
    assert run["run"] == "off-seed0" and len(run["val_curve"]) == 3  # initial + 2 validations
    assert off["reached_target"] == "1/1" and off["iterations_to_target_median"] >= 1
    assert off["rank_spearman_stale_fresh"]["n"] == 0  # no exploration, no stale rewards
    assert 0.0 <= off["zero_std_group_share"] <= 1.0
    assert (tmp_path / "exploration.png").stat().st_size > 0
    # Running it again reuses the finished runs instead of training again.
    before = (tmp_path / "runs/off-seed0/metrics.jsonl").stat().st_mtime
    assert main(["bench", "exploration", "--recipe", "tiny-smoke", "--iterations", "2",
                 "--seeds", "0", "--modes", "off", "--out", str(tmp_path)]) == 0  # fmt: skip
    assert (tmp_path / "runs/off-seed0/metrics.jsonl").stat().st_mtime == before
