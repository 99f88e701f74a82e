"""The exploration bench reuses a run folder, or an earlier report's record, only for the very
config it ran."""

from __future__ import annotations

import dataclasses
import json

import pytest

from spotlight.bench import (
    _check_same_config,
    finished_runs,
    repo_relative,
    report_records,
    run_config,
    summarize_runs,
)
from spotlight.recipes import get_recipe


def test_a_run_written_before_a_new_config_field_is_still_reused(tmp_path):
    cfg = get_recipe("tiny-smoke")
    old = cfg.to_dict()
    del old["reward_model"]  # written by a version without the field
    (tmp_path / "config.json").write_text(json.dumps(old))
    _check_same_config(tmp_path, cfg)  # the field's default: the same config


def test_a_run_of_another_config_is_refused(tmp_path):
    cfg = get_recipe("tiny-smoke")
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_dict()))
    _check_same_config(tmp_path, cfg)
    other = dataclasses.replace(cfg, seed=cfg.seed + 1)
    with pytest.raises(ValueError, match="another config"):
        _check_same_config(tmp_path, other)
    _check_same_config(tmp_path / "absent", other)  # nothing there yet: fine


def _record(cfg, name="off-seed0"):
    return {
        "run": name,
        "initial_val_reward": 0.2,
        "final_val_reward": 0.31,
        "val_curve": [[0, 0.0, 0.2], [2, 50.0, 0.26], [4, 100.0, 0.31]],
        "iterations_to_target": 4,
        "wall_s_to_target": 100.0,
        "group_reward_std_mean": 0.3,
        "zero_std_group_share": 0.0,
        "wall_s_per_iteration": 25.0,
        "spearman": [],
        "config": cfg.to_dict(),
    }


def test_a_report_record_of_the_same_config_counts_as_finished(tmp_path):
    base = get_recipe("tiny-smoke")
    configs = {(m, 0): run_config(base, m, 0) for m in ("off", "spot")}
    reuse = {"off-seed0": _record(configs["off", 0])}
    runs = finished_runs(tmp_path, configs, reuse)
    assert runs == {"off": [reuse["off-seed0"]]}  # spot-seed0 has neither a folder nor a record
    # The target is found again on the record's curve, for the report's target delta.
    summary = summarize_runs(runs, target_delta=0.05)
    (run,) = summary["modes"]["off"]["runs"]
    assert (run["iterations_to_target"], run["wall_s_to_target"]) == (2, 50.0)
    assert summarize_runs(runs, 0.2)["modes"]["off"]["reached_target"] == "0/1"
    # Its validation gain per iteration, from the same curve: (2 x 0.06 + 4 x 0.11) / (4 + 16).
    assert run["val_gain_per_iteration"] == pytest.approx(0.028)
    assert summary["modes"]["off"]["val_gain_per_iteration_mean"] == pytest.approx(0.028)


def test_a_report_record_of_another_config_or_none_is_not_reused(tmp_path):
    base = get_recipe("tiny-smoke")
    configs = {("off", 0): run_config(base, "off", 0)}
    other = _record(run_config(base, "off", 1))  # same name, another seed
    assert finished_runs(tmp_path, configs, {"off-seed0": other}) == {}
    old = _record(configs["off", 0])
    del old["config"]  # a report written before records held their config
    assert finished_runs(tmp_path, configs, {"off-seed0": old}) == {}
    # A record whose config lacks a field added since is still the same config.
    ok = _record(configs["off", 0])
    del ok["config"]["reward_model"]
    assert finished_runs(tmp_path, configs, {"off-seed0": ok}) == {"off": [ok]}


def test_report_records_are_read_by_run_name(tmp_path):
    base = get_recipe("tiny-smoke")
    doc = {
        "modes": {"off": {"runs": [_record(base)]}, "spot": {"runs": [_record(base, "spot-seed0")]}}
    }
    (tmp_path / "r.json").write_text(json.dumps(doc))
    assert set(report_records(tmp_path / "r.json")) == {"off-seed0", "spot-seed0"}


def test_new_modes_configure_rescue_and_full_pool():
    base = get_recipe("tiny-ocr")
    rescue = run_config(base, "rescue", 1).exploration
    assert (rescue.mode, rescue.selection, rescue.pool_advantages) == ("spot", "rescue", False)
    pool = run_config(base, "full_pool", 1).exploration
    assert (pool.mode, pool.selection, pool.pool_advantages) == (
        "critical_path",
        "max_variance",
        True,
    )
    live = run_config(base, "spot_live", 1).exploration
    assert (live.mode, live.planner_gain, live.selection) == ("spot", "live", "max_variance")
    for mode in ("rescue", "full_pool", "spot_live"):
        run_config(base, mode, 0).validate()


def test_pool_advantages_need_the_critical_path():
    cfg = get_recipe("tiny-ocr")
    bad = dataclasses.replace(
        cfg, exploration=dataclasses.replace(cfg.exploration, pool_advantages=True)
    )
    with pytest.raises(ValueError, match="critical_path"):
        bad.validate()
    with pytest.raises(ValueError, match="selection"):
        dataclasses.replace(
            cfg, exploration=dataclasses.replace(cfg.exploration, selection="best")
        ).validate()


def test_summary_has_means_first_iterations_dead_share_and_relative_paths(tmp_path):
    cfg = get_recipe("tiny-ocr")
    run = tmp_path / "runs" / "spot-seed0"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(cfg.to_dict()))
    (run / "val_initial.json").write_text(json.dumps({"val_reward": 0.1}))
    rows = [
        {
            "iteration": i,
            "wall_s": 10.0 * (i + 1),
            "num_samples": 64,
            "zero_std_groups": 4 if i < 5 else 0,
            "group_reward_std_mean": 0.2,
            "explored_selected_group_std": 0.4 if i else float("nan"),
            "explored_random_group_std": 0.1,
            **({"val_reward": 0.1 + 0.02 * i} if i % 2 else {}),
        }
        for i in range(10)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = summarize_runs({"spot": [run]}, 0.1)
    mode = summary["modes"]["spot"]
    assert mode["zero_std_group_share_first5"] == pytest.approx(0.5)  # 4 of 8 groups
    assert mode["zero_std_group_share"] == pytest.approx(20 / 80)
    assert mode["explored_selected_group_std_mean"] == pytest.approx(0.4)  # the NaN left out
    assert mode["iterations_to_target_mean"] == 6  # 0.1 + 0.02 * 5 at iteration 6
    checkpoint = mode["runs"][0]["config"]["policy"]["checkpoint"]
    assert checkpoint == "spotlight/assets/ocr-mini.safetensors"


def test_a_record_with_repository_relative_paths_is_the_same_config(tmp_path):
    base = get_recipe("tiny-ocr")  # its checkpoint: an absolute path into the repository
    configs = {("off", 0): run_config(base, "off", 0)}
    record = _record(configs["off", 0])
    record["config"] = repo_relative(record["config"])  # as a report writes it
    assert record["config"]["policy"]["checkpoint"] == "spotlight/assets/ocr-mini.safetensors"
    assert finished_runs(tmp_path, configs, {"off-seed0": record}) == {"off": [record]}


def test_the_bench_writes_its_figures_reuses_its_runs_and_refuses_another_config(tmp_path):
    from spotlight.cli import main

    args = [
        "bench", "exploration", "--runner", "local", "--recipe", "tiny-smoke",
        "--iterations", "2", "--val-every", "1", "--seeds", "0", "--modes", "off", "spot",
        "--target-delta", "0.0", "--budget-seeds", "12", "--set", "num_val_seeds=1",
        "--out", str(tmp_path),
    ]  # fmt: skip
    assert main(args) == 0
    doc = json.loads((tmp_path / "exploration.json").read_text())
    assert set(doc["modes"]) == {"off", "spot"} and doc["runner"] == "local"
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


def test_a_going_run_is_said_with_its_iterations(tmp_path):
    from spotlight.bench import _where

    run = tmp_path / "runs" / "spot-seed3"
    assert _where(tmp_path, "spot-seed3") == "spot-seed3 starting"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"num_iterations": 30}))
    assert _where(tmp_path, "spot-seed3") == "spot-seed3 at 0/30 iterations"
    (run / "metrics.jsonl").write_text("{}\n" * 12)
    assert _where(tmp_path, "spot-seed3") == "spot-seed3 at 12/30 iterations"
