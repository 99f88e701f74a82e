"""`spotlight bench exploration` end to end on a tiny recipe (one Ray for all runs)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_bench_exploration_writes_its_figures(local_ray, tmp_path):
    from spotlight.cli import main

    args = ["bench", "exploration", "--recipe", "tiny-smoke", "--iterations", "2",
            "--val-every", "1", "--seeds", "0", "--modes", "off", "spot", "--target-delta",
            "0.0", "--budget-seeds", "12", "--set", "num_val_seeds=1",
            "--out", str(tmp_path)]  # fmt: skip
    assert main(args) == 0
    doc = json.loads((tmp_path / "exploration.json").read_text())
    assert set(doc["modes"]) == {"off", "spot"}
    assert doc["val_seeds"] == 1 and doc["budget_seeds"] == 12 and doc["task"] is None
    # A fixed budget is explored in full before the next rollout: 12 seeds are 3 chunks of 4,
    # all three for one prompt, or two for one (a first allocation costs two chunks).
    metrics = (tmp_path / "runs/spot-seed0/metrics.jsonl").read_text()
    rows = [json.loads(x) for x in metrics.splitlines()]
    assert rows[1]["explore_budget_predicted"] == 12
    assert rows[1]["explore_budget_used"] in (8, 12)
    off = doc["modes"]["off"]
    (run,) = off["runs"]
    assert run["run"] == "off-seed0" and len(run["val_curve"]) == 3  # initial + 2 validations
    assert off["reached_target"] == "1/1" and off["iterations_to_target_median"] >= 1
    assert off["rank_spearman_stale_fresh"]["n"] == 0  # no exploration, no stale rewards
    assert 0.0 <= off["zero_std_group_share"] <= 1.0
    assert (tmp_path / "exploration.png").stat().st_size > 0
    # Running it again reuses the finished runs instead of training again.
    before = (tmp_path / "runs/off-seed0/metrics.jsonl").stat().st_mtime
    assert main([*args, "--name", "again"]) == 0
    assert (tmp_path / "runs/off-seed0/metrics.jsonl").stat().st_mtime == before
    assert json.loads((tmp_path / "again.json").read_text())["modes"] == doc["modes"]
    # Another folder, without the run folders: the report's records count as finished.
    other = tmp_path / "next-session"
    reuse = ["--reuse", str(tmp_path / "exploration.json"), "--out", str(other)]
    assert main([*args, *reuse]) == 0
    assert not (other / "runs").exists()
    assert json.loads((other / "exploration.json").read_text())["modes"] == doc["modes"]
    # The report alone, from what has finished (one mode of two here, a missing seed is skipped).
    (tmp_path / "runs/spot-seed0/summary.json").rename(tmp_path / "spot-summary.json")
    assert main([*args, "--seeds", "0", "1", "--report-only", "--name", "partial"]) == 0
    partial = json.loads((tmp_path / "partial.json").read_text())
    assert set(partial["modes"]) == {"off"} and partial["modes"]["off"] == doc["modes"]["off"]
    (tmp_path / "spot-summary.json").rename(tmp_path / "runs/spot-seed0/summary.json")
    # ... but not a run of another config.
    assert main([*args, "--set", "num_val_seeds=2"]) == 2
    assert (tmp_path / "runs/off-seed0/metrics.jsonl").stat().st_mtime == before


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
