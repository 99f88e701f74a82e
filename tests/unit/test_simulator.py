"""The simulator: SP group formation, accounting against hand-computed cases, determinism,
every trace format, zero spot capacity, and preemptions with and without notice."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json

import numpy as np
import pytest

from spotlight.scheduling.costs import PriceTable
from spotlight.scheduling.traces import TRACES_DIR, CapacityTrace, load_trace
from spotlight.sim.scenarios import SCENARIOS
from spotlight.sim.sim_model import (
    SYSTEMS,
    LearningModel,
    Overheads,
    Scenario,
    StepCosts,
)
from spotlight.sim.simulator import Simulation
from spotlight.sp.sp_groups import assign, check_degree, form_groups, split_work, valid_degrees

SMALL = SCENARIOS["small"]


def test_form_groups():
    valid = (1, 2, 3, 4, 6, 8)
    assert form_groups(7, 4, valid) == [4, 3]
    assert form_groups(8, 4, valid) == [4, 4]
    assert form_groups(3, 4, valid) == [3]
    assert form_groups(5, 2, (1, 2)) == [2, 2, 1]
    assert form_groups(0, 1, valid) == []
    with pytest.raises(ValueError, match="not valid"):
        form_groups(4, 5, valid)
    assert valid_degrees(24) == (1, 2, 3, 4, 6, 8, 12, 24)
    assert valid_degrees(24, 8) == valid
    assert assign([7, 3, 5], 2, (1, 2, 4)) == [[7, 3], [5]]
    check_degree(4, 24)
    with pytest.raises(ValueError, match="does not divide the model's 24 attention heads"):
        check_degree(5, 24)


def test_split_work_shares_an_item_in_proportion_to_group_sizes():
    import random

    assert split_work(10, [2, 1, 1]) == [5, 3, 2]
    assert split_work(8, [4]) == [8]
    assert split_work(3, [1, 1, 1, 1]) == [1, 1, 1, 0]
    rng = random.Random(0)
    for _ in range(500):
        sizes = [rng.choice([1, 2, 3, 4, 6]) for _ in range(rng.randint(1, 5))]
        n = rng.randint(0, 40)
        counts = split_work(n, sizes)
        assert sum(counts) == n and min(counts) >= 0
        for c, g in zip(counts, sizes, strict=True):  # within one sample of the exact share
            assert abs(c - n * g / sum(sizes)) < 1
    with pytest.raises(ValueError, match="group sizes"):
        split_work(4, [2, 0])


def test_step_costs_come_from_the_calibration_files(tmp_path):
    c512 = StepCosts.from_calib(1024)
    c1280 = StepCosts.from_calib(6400)
    # sampling: the recipes' sampler, a warm item of 8 samples x 10 steps in 12.944 s
    assert c512.sample_step_s == pytest.approx(12.944 / 80, abs=1e-4)
    assert c1280.sample_step_s > 5 * c512.sample_step_s
    # the update: forward + backward with checkpointing at the best batch of the bare DiT
    assert c512.train_step_s == StepCosts.from_calib(1024, recipe_path=None).train_step_s
    assert c512.model_gb == pytest.approx(40.86, abs=0.01)
    # without the recipe file (or a size it lacks): the bare transformer's two forwards,
    # fwd at batch 16, 1024 tokens: 0.6367 s -> 0.0398 s per sample, x2 for guidance
    bare = StepCosts.from_calib(1024, recipe_path=None)
    assert bare.sample_step_s == pytest.approx(2 * 0.6367070617675781 / 16)
    other = tmp_path / "recipe.json"
    other.write_text(
        json.dumps({"runs": [{"image_size": [256, 256], "warm_item_s_per_sample_step": 1.0}]})
    )
    assert StepCosts.from_calib(1024, recipe_path=other).sample_step_s == bare.sample_step_s
    with pytest.raises(ValueError, match="no calibration rows"):
        StepCosts.from_calib(999)


def _hand_scenario(**changes) -> Scenario:
    base = dict(
        name="hand",
        image_tokens=1024,
        trainer_gpus=1,
        sampler_gpus=1,
        fallback_gpus=1,
        prompts_per_iteration=1,
        group_size=2,
        num_steps=2,
        train_step_fraction=0.5,
        batch_size=2,
        sp_degree=1,
        valid_degrees=(1,),
        explore_candidates=4,
        critical_candidates=4,
        step_costs=StepCosts(sample_step_s=1.0, train_step_s=1.0, model_gb=1.0),
        overheads=Overheads(weights_broadcast_s=2.0, replica_start_s=0.0, spill_wait_s=0.0),
        max_hours=0.05,
    )
    return Scenario(**{**base, **changes})


def _explore_scenario(max_hours: float) -> Scenario:
    """8 prompts of groups of 4 per iteration, 8 candidates explored, best-of-16 on the path."""
    return _hand_scenario(
        max_hours=max_hours,
        prompts_per_iteration=8,
        batch_size=4,
        group_size=4,
        explore_candidates=8,
        critical_candidates=16,
    )


def test_accounting_matches_a_hand_computed_iteration():
    # Rollout: one item of 2 samples x 2 steps at 1 s per sample-step on 1 GPU = 4 s, after a
    # 2 s weights load. Update: 1 prompt x 2 samples x 1 trained step x 1 s on 1 GPU = 2 s.
    # An iteration is 8 s; 2 on-demand GPUs are held throughout (16 GPU-s), busy 4 + 2 = 6.
    sim = Simulation(_hand_scenario(), SYSTEMS["on_demand_grpo"], None, PriceTable(6.88, 0.73))
    r = sim.run()
    first, second = r.timeline[0], r.timeline[1]
    assert first["t_h"] * 3600 == pytest.approx(8.0)
    assert second["t_h"] * 3600 == pytest.approx(16.0)
    assert first["cost_usd"] == pytest.approx(16 * 6.88 / 3600)
    assert first["util_on_demand"] == pytest.approx(6 / 16)
    n = r.iterations
    assert r.ledger.held_s["on_demand"] == pytest.approx(16.0 * n)
    assert r.ledger.busy_s["on_demand"] == pytest.approx(6.0 * n)
    assert r.ledger.held_s["spot"] == 0.0
    s = r.summary()
    assert s["idle_gpu_h"] == pytest.approx(10.0 * n / 3600)


def test_spot_gpus_are_billed_at_the_spot_price_while_the_trace_holds_them():
    # One spot GPU from t=0 on: the rollout runs on it; it is held all the time.
    trace = CapacityTrace("one", (0.0,), (1,), 10.0)
    sc = _hand_scenario(
        overheads=Overheads(weights_broadcast_s=2.0, replica_start_s=0.0, spill_wait_s=1e6)
    )
    r = Simulation(sc, SYSTEMS["spot_grpo"], trace, PriceTable(6.88, 0.75)).run()
    t = r.timeline[0]["t_h"] * 3600
    assert t == pytest.approx(8.0)
    assert r.ledger.held_s["spot"] == pytest.approx(r.wall_h * 3600)
    spot_usd = r.ledger.held_s["spot"] * 6.88 * 0.25 / 3600
    od_usd = r.ledger.held_s["on_demand"] * 6.88 / 3600
    assert r.ledger.cost_usd() == pytest.approx(spot_usd + od_usd)
    assert r.ledger.held_s["on_demand"] == pytest.approx(r.wall_h * 3600)  # the trainer only


def test_same_seed_same_result_and_every_trace_format_runs():
    traces = sorted(p for p in TRACES_DIR.glob("*/*") if p.suffix in (".json", ".csv"))
    sc = dataclasses.replace(SMALL, max_hours=2.0)
    for path in traces:
        r = Simulation(sc, SYSTEMS["spotlight"], load_trace(path), seed=3).run()
        assert r.iterations > 0, path
    a = Simulation(SMALL, SYSTEMS["spotlight"], load_trace(SMALL.trace), seed=1).run()
    b = Simulation(SMALL, SYSTEMS["spotlight"], load_trace(SMALL.trace), seed=1).run()
    assert json.dumps(a.summary()) == json.dumps(b.summary())
    assert a.timeline == b.timeline


def test_zero_spot_capacity_degrades_to_on_demand_behaviour():
    none = CapacityTrace("none", (0.0,), (0,), 3600.0)
    sc = _hand_scenario(
        max_hours=2.0, prompts_per_iteration=8, batch_size=4, group_size=4, explore_candidates=8
    )
    learn = LearningModel(baseline_iterations=20)
    od = Simulation(sc, SYSTEMS["on_demand_grpo"], None, learning=learn).run()
    spot = Simulation(sc, SYSTEMS["spot_grpo"], none, learning=learn).run()
    assert spot.ledger.held_s["spot"] == 0.0 and spot.preemptions == 0
    assert spot.spill_launches == 1  # the fallback came once and stayed
    assert spot.reached and od.reached
    assert spot.iterations == od.iterations
    assert spot.time_to_target_h == pytest.approx(od.time_to_target_h)
    assert spot.ledger.cost_usd() == pytest.approx(od.ledger.cost_usd())


def test_exploration_with_no_capacity_left_waits_out_the_update_and_training_goes_on():
    # The spot node goes at 30 s and the trace holds no more capacity: exploration during an
    # update has nothing to run on and nothing will happen; it ends with the update, and the
    # rollouts fall back to on-demand samplers (the trainer does not sample in this system).
    gone = CapacityTrace("gone", (0.0, 30.0), (1, 0), 10**6)
    sc = _hand_scenario(
        max_hours=2.0, prompts_per_iteration=8, batch_size=4, group_size=4, explore_candidates=8
    )
    learn = LearningModel(baseline_iterations=20)
    r = Simulation(sc, SYSTEMS["ablation_no_trainer_samples"], gone, learning=learn).run()
    assert r.reached and r.preemptions == 1
    assert r.spill_launches >= 1


def _kill_mid_rollout(hard_share: float, commit_every: int):
    # Two spot GPUs; one goes at t=5 s, mid-item (items take 2 x 4 steps x 1 s = 8 s + 2 s load).
    trace = CapacityTrace("drop", (0.0, 5.0), (2, 1), 100.0)
    sc = _hand_scenario(
        sampler_gpus=2,
        prompts_per_iteration=2,
        num_steps=4,
        commit_every=commit_every,
        overheads=Overheads(
            weights_broadcast_s=2.0,
            replica_start_s=0.0,
            spill_wait_s=1000.0,
            notice_s=2.0,
            hard_share=hard_share,
            lease_s=3.0,
        ),
        max_hours=0.01,
    )
    return Simulation(
        sc, SYSTEMS["spot_grpo"], trace, learning=LearningModel(baseline_iterations=1)
    )


def test_a_preemption_with_notice_loses_no_work_and_without_one_loses_steps_since_the_commit():
    noticed = _kill_mid_rollout(hard_share=0.0, commit_every=2)
    r = noticed.run()
    assert r.preemptions == 1 and r.notices == 1 and r.work_redone_gpu_s == 0.0
    assert noticed.queue.stats()["items_resumed"] == 1
    killed = _kill_mid_rollout(hard_share=1.0, commit_every=2)
    r = killed.run()
    assert r.preemptions == 1 and r.notices == 0
    # killed at 5 s: 3 s into the item (after the 2 s load) = 1.5 steps at 2 s per step;
    # no commit yet (first at step 2): 3 GPU-s redone
    assert r.work_redone_gpu_s == pytest.approx(3.0)
    assert killed.leases_expired == 1
    no_commits = _kill_mid_rollout(hard_share=1.0, commit_every=0).run()
    assert no_commits.work_redone_gpu_s == pytest.approx(3.0)


def test_a_preempted_node_takes_all_its_sp_groups_with_one_notice():
    # One spot node of 8 GPUs = two SP-4 groups, each with an item; the node goes at 5 s with
    # a notice: both items are committed and handed back at once, and the fallback finishes them
    trace = CapacityTrace("drop", (0.0, 5.0), (3, 0), 100.0)  # the trace's unit: nodes
    sc = _hand_scenario(
        sampler_gpus=8,
        gpus_per_node=8,
        sp_degree=4,
        valid_degrees=(1, 2, 4),
        sp_efficiency={4: 1.0},
        fallback_gpus=4,
        prompts_per_iteration=2,
        num_steps=4,
        commit_every=0,
        overheads=Overheads(
            weights_broadcast_s=2.0,
            replica_start_s=0.0,
            spill_wait_s=1.0,
            notice_s=2.0,
            hard_share=0.0,
        ),
        max_hours=0.01,
    )
    sim = Simulation(sc, SYSTEMS["spot_grpo"], trace, learning=LearningModel(baseline_iterations=1))
    r = sim.run()
    assert r.preemptions == 1 and r.notices == 1  # one node, not eight GPUs
    assert sim.queue.stats()["items_resumed"] == 2  # both groups' items, from their commits
    assert r.work_redone_gpu_s == 0.0
    # the spot GPUs are held from 0 s until the node goes at 5 s: 8 GPUs x 5 s
    assert r.ledger.held_s["spot"] == pytest.approx(8 * 5.0)
    with pytest.raises(ValueError, match="whole nodes"):
        _hand_scenario(sampler_gpus=12, gpus_per_node=8)
    with pytest.raises(ValueError, match="SP group of 4"):
        _hand_scenario(sampler_gpus=8, gpus_per_node=2, sp_degree=4)


def test_a_node_that_goes_before_its_notice_could_reach_it_goes_without_one():
    # Node A is up from 0 to 200 s, node B from 300 to 350 s, with 120 s notices. B's notice is
    # due at 230 s, when A is gone and B not yet up: B goes at 350 s without a usable notice.
    trace = CapacityTrace("gap", (0.0, 200.0, 300.0, 350.0), (1, 0, 1, 0), 400.0)
    sc = _hand_scenario(
        overheads=Overheads(replica_start_s=0.0, notice_s=120.0, hard_share=0.0), max_hours=1.0
    )
    sim = Simulation(sc, SYSTEMS["spot_grpo"], trace, learning=LearningModel(baseline_iterations=1))
    sim._idle_until(360.0)
    assert sim.spot_capacity == 0 and not sim.nodes  # both nodes gone
    assert sim.preemptions == 2 and sim.notices == 1


def test_paper_scenarios_are_well_formed():
    for name in ("paper-512", "paper-1280"):
        sc = SCENARIOS[name]
        assert sc.sp_degree in sc.valid_degrees
        assert sc.costs().sample_step_s > 0
    assert set(SYSTEMS) >= {
        "on_demand_grpo",
        "on_demand_critical_path",
        "spot_grpo",
        "spotlight",
        "ablation_uniform_planner",
        "ablation_push",
        "colocated",
        "colocated_same_total",
        "async_one_step",
    }


def test_simulate_command_writes_the_summary_report_and_plots(tmp_path):
    from spotlight.cli import main
    from spotlight.sim import sim_report

    out = tmp_path / "sim"
    rc = main(["simulate", "--scenario", "small", "--trace", "p3-trace.csv", "--out", str(out)])
    assert rc == 0
    s = json.loads((out / "summary.json").read_text())
    assert set(s["systems"]) == set(SYSTEMS)
    for r in s["systems"].values():
        for key in (
            "time_to_target_h",
            "cost_usd",
            "gpu_util_spot",
            "gpu_util_on_demand",
            "preemptions",
            "work_redone_gpu_h",
            "iterations",
            "time_per_iteration_s",
            "on_demand_gpus",
            "total_gpus",
        ):
            assert key in r
    assert s["trace"] == "p3-trace" and s["paper"]["speedup_vs_baselines"] == 4.0
    assert {m["kind"] for m in s["measured_vs_modelled"]} >= {"measured", "modelled"}
    for name in ("report.md", "reward_vs_time.png", "cost_vs_time.png", "utilization.png"):
        assert (out / name).stat().st_size > 0
    report = (out / "report.md").read_text()
    assert "| spotlight |" in report
    # the time ratio over Spotlight splits into time per iteration x iterations
    assert set(s["ratios"]) == set(SYSTEMS) - {"spotlight"}
    for v in s["ratios"].values():
        if v["speedup"] is not None:
            split = v["time_per_iteration_ratio"] * v["iterations_ratio"]
            assert split == pytest.approx(v["speedup"], rel=1e-9)
    spot = s["systems"]["spotlight"]
    best = s["best_baselines"]
    for framing, key in (
        ("equal_on_demand_gpus", "on_demand_gpus"),
        ("equal_total_gpus", "total_gpus"),
    ):
        b = best[framing]
        matched = [
            n
            for n in sim_report.BASELINES
            if s["systems"][n][key] == spot[key] and s["systems"][n]["reached_target"]
        ]
        if not matched:
            assert b is None
            continue
        assert b["system"] == min(matched, key=lambda n: s["systems"][n]["time_to_target_h"])
    assert "at Spotlight's on-demand GPUs: `" in report and "s / iteration ratio" in report
    assert main(["simulate", "--scenario", "small", "--trace", "nope.csv", "--out", str(out)]) == 2


def _exploration_summary(off_its, spot_its, off_std=0.1, spot_std=0.2):
    def mode(its, std):
        runs = [{"iterations_to_target": i} for i in its]
        reached = sum(i is not None for i in its)
        return {"runs": runs, "group_reward_std_mean": std, "reached_target": f"{reached}/3"}

    return {"modes": {"off": mode(off_its, off_std), "spot": mode(spot_its, spot_std)}}


def test_contrast_exponent_is_fitted_from_iterations_to_target_and_group_std():
    from spotlight.sim.sim_fit import fit_contrast_exponent

    # Twice the std, twice as fast: k = 1. Twice the std, 4x as fast: k = 2.
    fit = fit_contrast_exponent(_exploration_summary([10, 10, 10], [5, 5, 5]))
    assert fit["k"] == pytest.approx(1.0) and fit["baseline_iterations_to_target"] == 10
    assert fit["points"][0]["speedup"] == pytest.approx(2.0)
    fit = fit_contrast_exponent(_exploration_summary([8, 12, None], [2, 3, 2.5]))
    assert fit["k"] == pytest.approx(2.0)  # runs that missed the target are left out
    # Equal std: no information about k.
    assert fit_contrast_exponent(_exploration_summary([10], [5], 0.1, 0.1))["k"] is None
    assert fit_contrast_exponent(_exploration_summary([None], [5]))["k"] is None
    with pytest.raises(ValueError, match="no 'off' mode"):
        fit_contrast_exponent({"modes": {"spot": {}}})


def test_contrast_exponent_pools_the_points_of_several_benches():
    from spotlight.sim.sim_fit import fit_contrast_exponent

    # std x2 with speed-ups 2 and 4 (k 1 and 2 alone): pooled, the least-squares slope is 1.5
    one = _exploration_summary([10, 10, 10], [5, 5, 5])
    two = _exploration_summary([8, 12, None], [2, 3, 2.5])
    fit = fit_contrast_exponent([one, two])
    assert fit["k"] == pytest.approx(1.5)
    assert len(fit["points"]) == 2 and fit["baseline_iterations_to_target"] == [10, 10]
    assert fit_contrast_exponent([one])["k"] == pytest.approx(1.0)


def test_contrast_exponent_zero_makes_every_iteration_count_the_same():
    sc = _explore_scenario(max_hours=2.0)
    flat = LearningModel(baseline_iterations=12, signal="contrast", contrast_exponent=0.0)
    runs = [
        Simulation(sc, SYSTEMS[s], None, learning=flat).run()
        for s in ("on_demand_grpo", "on_demand_critical_path")
    ]
    assert [r.iterations for r in runs] == [12, 12]
    # With k = 1 the selected groups' larger std makes each critical-path iteration count more.
    prop = LearningModel(baseline_iterations=12, signal="contrast", contrast_exponent=1.0)
    cp = Simulation(sc, SYSTEMS["on_demand_critical_path"], None, learning=prop).run()
    assert cp.iterations < 12


def test_validation_gain_per_iteration_is_the_slope_through_the_initial_validation():
    from spotlight.sim.sim_fit import val_gain_per_iteration

    # (iteration, wall_s, val): gains 0.02 and 0.04 at iterations 2 and 4 -> 0.01 a step
    assert val_gain_per_iteration([(0, 0.0, 0.2), (2, 5.0, 0.22), (4, 9.0, 0.24)]) == (
        pytest.approx(0.01)
    )
    # least squares through the origin: (1 x 0.03 + 2 x 0.02) / (1 + 4)
    assert val_gain_per_iteration([(0, 0.0, 0.5), (1, 1.0, 0.53), (2, 2.0, 0.52)]) == (
        pytest.approx(0.014)
    )
    assert val_gain_per_iteration([(0, 0.0, 0.5)]) is None


def _slope_summary(off_gains, spot_gains, off_std=0.1, spot_std=0.2):
    """A summary whose runs climb linearly at the given gains per iteration for 4 iterations,
    crossing the target whenever they do (iterations to target 10 in every run)."""

    def mode(gains, std):
        runs = [
            {"iterations_to_target": 10, "val_curve": [(i, 0.0, 0.1 + g * i) for i in range(5)]}
            for g in gains
        ]
        return {"runs": runs, "group_reward_std_mean": std, "reached_target": "3/3"}

    return {"modes": {"off": mode(off_gains, off_std), "spot": mode(spot_gains, spot_std)}}


def test_contrast_exponent_is_fitted_from_the_validation_gain_per_iteration():
    from spotlight.sim.sim_fit import fit_contrast_exponent

    # Equal iterations to target, but twice the std climbs twice as fast: k = 1 by slope, 0 by
    # iterations; 4x as fast (means 0.01 and 0.04): k = 2.
    summary = _slope_summary([0.01, 0.01, 0.01], [0.02, 0.02, 0.02])
    assert fit_contrast_exponent(summary, speedup="slope")["k"] == pytest.approx(1.0)
    assert fit_contrast_exponent(summary)["k"] == pytest.approx(0.0)
    summary = _slope_summary([0.005, 0.015], [0.03, 0.05, 0.04])
    fit = fit_contrast_exponent(summary, speedup="slope")
    assert fit["k"] == pytest.approx(2.0) and fit["points"][0]["speedup"] == pytest.approx(4.0)
    # A baseline that never gained: no slope ratio to fit.
    assert fit_contrast_exponent(_slope_summary([0.0], [0.02]), speedup="slope")["k"] is None
    with pytest.raises(ValueError, match="speedup must be one of"):
        fit_contrast_exponent(summary, speedup="wall")


def test_simulate_fits_the_contrast_exponent_from_an_exploration_summary(tmp_path, capsys):
    from spotlight.cli import main

    good = tmp_path / "exploration.json"
    good.write_text(json.dumps(_exploration_summary([10, 10, 10], [5, 5, 5])))
    out = tmp_path / "sim"
    args = ["simulate", "--scenario", "small", "--systems", "spotlight", "--out", str(out)]
    contrast = [*args, "--signal", "contrast"]
    assert main([*contrast, "--fit-exploration", str(good)]) == 0
    assert json.loads((out / "summary.json").read_text())["learning"]["contrast_exponent"] == 1.0
    assert "contrast exponent k = 1.000" in capsys.readouterr().out
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps(_exploration_summary([10], [5], 0.1, 0.1)))
    assert main([*contrast, "--fit-exploration", str(flat)]) == 2
    assert "cannot be fitted" in capsys.readouterr().err
    by_slope = tmp_path / "slope.json"
    by_slope.write_text(json.dumps(_slope_summary([0.01, 0.01, 0.01], [0.02, 0.02, 0.02])))
    assert main([*contrast, "--fit-exploration", str(by_slope), "--fit-by", "slope"]) == 0
    learning = json.loads((out / "summary.json").read_text())["learning"]
    assert learning["contrast_exponent"] == pytest.approx(1.0)
    assert "2.00x the validation gain per iteration" in capsys.readouterr().out


def _pipeline_scenario(train_step_s: float) -> Scenario:
    # 2 trainer + 2 sampler GPUs; a rollout of 4 items of 2 samples x 2 steps at 1 s per
    # sample-step: 2 items per GPU = 8 s, after the 2 s weights pick-up; the update trains
    # 4 prompts x 2 samples x 1 step at ``train_step_s`` per sample-step over the trainer GPUs.
    return _hand_scenario(
        trainer_gpus=2,
        sampler_gpus=2,
        prompts_per_iteration=4,
        max_hours=1.0,
        step_costs=StepCosts(sample_step_s=1.0, train_step_s=train_step_s, model_gb=1.0),
    )


def test_colocated_samples_then_trains_on_the_same_on_demand_gpus():
    flat = LearningModel(baseline_iterations=5, live_exponent=0.0)
    sc = _pipeline_scenario(train_step_s=1.0)
    # (GPUs, rollout on them incl. the 2 s pick-up, update = 4 x 2 x 1 x 1 s / GPUs)
    for name, gpus, sample_s in (("colocated", 2, 2 + 8), ("colocated_same_total", 4, 2 + 4)):
        system = SYSTEMS[name]
        assert system.trainer_gpus(sc) == system.on_demand_gpus(sc) == system.total_gpus(sc)
        assert system.trainer_gpus(sc) == gpus
        r = Simulation(sc, system, None, learning=flat).run()
        iteration_s = sample_s + 8 / gpus
        assert [p["t_h"] * 3600 for p in r.timeline] == pytest.approx(
            [iteration_s * (k + 1) for k in range(5)]
        )
        assert r.iterations == 5 and r.time_per_iteration_s == pytest.approx(iteration_s)
        assert r.ledger.held_s["spot"] == 0.0 and r.preemptions == 0
        # the GPUs are held once: sampling and training share them
        assert r.ledger.held_s["on_demand"] == pytest.approx(gpus * iteration_s * 5)
        # busy: 4 items x 4 GPU-s of sampling (the pick-up is not work) + 8 GPU-s of update
        assert r.ledger.busy_s["on_demand"] == pytest.approx((16 + 8) * 5)
        assert r.on_demand_gpus == r.total_gpus == gpus
    # separate pools on the same 4 GPUs: a rollout of 10 s on 2 samplers, then 4 s on 2 trainers
    od = Simulation(sc, SYSTEMS["on_demand_grpo"], None, learning=flat).run()
    assert od.time_per_iteration_s == pytest.approx(14.0)
    assert (od.on_demand_gpus, od.total_gpus) == (4, 4)


def test_a_split_system_moves_gpus_between_its_pools_and_keeps_their_total():
    flat = LearningModel(baseline_iterations=5, live_exponent=0.0)
    sc = _pipeline_scenario(train_step_s=1.0)  # 2 trainer + 2 sampler GPUs
    split = dataclasses.replace(SYSTEMS["on_demand_grpo_split"], trainer_share=2 / 3)  # 3 + 1
    assert (split.trainer_gpus(sc), split.sampler_gpus(sc)) == (3, 1)
    assert split.on_demand_gpus(sc) == split.total_gpus(sc) == 4
    r = Simulation(sc, split, None, learning=flat).run()
    # a rollout of 16 GPU-s on 1 sampler after the 2 s pick-up, then 8 GPU-s of update on 3
    assert r.time_per_iteration_s == pytest.approx(2 + 16 + 8 / 3)
    assert r.ledger.held_s["on_demand"] == pytest.approx(4 * r.wall_h * 3600)
    # the shipped split systems train on 1/3 of the GPUs: 1 + 3 here
    assert SYSTEMS["on_demand_grpo_split"].trainer_gpus(sc) == 1
    assert SYSTEMS["async_one_step_split"].trainer_gpus(sc) == 1


@pytest.mark.parametrize("train_step_s", [1.0, 4.0])
def test_async_one_step_takes_the_longer_of_rollout_and_update(train_step_s):
    flat = LearningModel(baseline_iterations=6, live_exponent=0.0)
    sc = _pipeline_scenario(train_step_s)
    sample_s, train_s = 2 + 8, 4 * 2 * train_step_s / 2
    r = Simulation(sc, SYSTEMS["async_one_step"], None, learning=flat).run()
    t = [p["t_h"] * 3600 for p in r.timeline]
    assert r.iterations == 6 and r.ledger.held_s["spot"] == 0.0
    # the first rollout fills the pipeline; the second, on the same weights, needs no pick-up;
    # then one iteration per max(rollout, update); the last update starts no rollout, so the
    # target is reached when it ends
    assert t[0] == pytest.approx(sample_s + max(sample_s - 2, train_s))
    gaps = [b - a for a, b in itertools.pairwise(t)]
    assert gaps[:-1] == pytest.approx([max(sample_s, train_s)] * 4)
    assert gaps[-1] == pytest.approx(train_s)
    assert r.time_to_target_h * 3600 == pytest.approx(t[-1])
    od = Simulation(sc, SYSTEMS["on_demand_grpo"], None, learning=flat).run()
    assert od.time_per_iteration_s == pytest.approx(sample_s + train_s)
    assert r.time_to_target_h < od.time_to_target_h


def test_async_staleness_factor_costs_iterations():
    sc = _pipeline_scenario(train_step_s=1.0)
    system = SYSTEMS["async_one_step"]
    # no penalty: the same rollouts count as much as plain GRPO's (common random numbers)
    fresh = Simulation(sc, system, None, learning=LearningModel(baseline_iterations=20)).run()
    od = Simulation(
        sc, SYSTEMS["on_demand_grpo"], None, learning=LearningModel(baseline_iterations=20)
    ).run()
    assert fresh.reached and fresh.iterations == od.iterations
    # every stale iteration (all but the first) counts 0.8: 1 + 0.8 x 24 >= 20 > 1 + 0.8 x 23
    stale = LearningModel(baseline_iterations=20, live_exponent=0.0, async_staleness_factor=0.8)
    r = Simulation(sc, system, None, learning=stale).run()
    assert r.iterations == 25
    flat = dataclasses.replace(stale, async_staleness_factor=1.0)
    assert Simulation(sc, system, None, learning=flat).run().iterations == 20
    # the factor is the async pipeline's alone
    assert Simulation(sc, SYSTEMS["on_demand_grpo"], None, learning=stale).run().iterations == 20


def test_the_learning_inputs_have_flags_and_bad_values_are_refused(tmp_path, capsys):
    from spotlight.cli import main

    base = ["simulate", "--scenario", "small", "--systems", "async_one_step", "--out"]
    args = [*base, str(tmp_path / "a"), "--prompts-file", "eval-geneval-mini-v1.json"]
    args += ["--rank-correlation", "0.5", "--async-staleness-factor", "0.9"]
    assert main(args) == 0
    learning = json.loads((tmp_path / "a" / "summary.json").read_text())["learning"]
    assert learning["prompts_file"] == "eval-geneval-mini-v1.json"
    assert learning["rank_preservation"] == 0.5 and learning["async_staleness_factor"] == 0.9
    for flag, value, says in (
        ("--prompts-file", "nope.json", "eval-ocr-mini-v0.json"),  # names the shipped ones
        ("--rank-correlation", "2", "[-1, 1]"),
        ("--async-staleness-factor", "0", "(0, 1]"),
    ):
        assert main([*base, str(tmp_path / "b"), flag, value]) == 2
        assert says in capsys.readouterr().err
    assert not (tmp_path / "b").exists()
    levels = [*base, str(tmp_path / "c"), "--reward-levels", "0.6", "0.9", "--exponent", "2"]
    assert main(levels) == 0
    learning = json.loads((tmp_path / "c" / "summary.json").read_text())["learning"]
    assert (learning["initial"], learning["target"], learning["follow_level"]) == (0.6, 0.9, True)
    assert learning["signal"] == "live_groups" and learning["live_exponent"] == 2.0
    for flag, values, says in (
        ("--reward-levels", ["0.9", "0.6"], "0 < FROM < TO < 1"),
        ("--signal", ["nope"], "invalid choice"),
    ):
        with contextlib.suppress(SystemExit):
            assert main([*base, str(tmp_path / "d"), flag, *values]) == 2
        assert says in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def _live_summary(off, spot, off_dead=0.5, spot_dead=0.0):
    """Iterations to target per run (None: missed, after a 30-iteration run) and dead shares."""

    def mode(its, dead):
        runs = [
            {"iterations_to_target": i, "val_curve": [(0, 0.0, 0.0), (30, 1.0, 0.1)]} for i in its
        ]
        reached = f"{sum(i is not None for i in its)}/{len(its)}"
        return {"runs": runs, "zero_std_group_share": dead, "reached_target": reached}

    return {"modes": {"off": mode(off, off_dead), "spot": mode(spot, spot_dead)}}


def test_the_live_group_exponent_is_fitted_from_dead_group_shares():
    from spotlight.sim.sim_fit import fit_exponent

    # twice the live groups (50% dead -> none), twice as fast: k = 1
    fit = fit_exponent(_live_summary([20, 20], [10, 10]))
    assert fit["k"] == pytest.approx(1.0) and fit["points"][0]["ratio"] == pytest.approx(2.0)
    # a run that missed the target counts as the 30 iterations it ran (a lower bound)
    fit = fit_exponent(_live_summary([None, 10], [10, 10]))
    assert fit["baseline_iterations_to_target"] == 20 and fit["k"] == pytest.approx(1.0)
    # the contrast fit leaves such runs out, as before
    summary = _exploration_summary([None, 10], [5, 5])
    assert fit_exponent(summary, "contrast")["baseline_iterations_to_target"] == 10
    with pytest.raises(ValueError, match="signal must be one of"):
        fit_exponent(summary, "std")


def test_progress_follows_live_groups_and_saturating_levels_kill_groups(tmp_path):
    from spotlight.sim.sim_model import LearningModel

    per_prompt = [{"rewards": [1.0] * k + [0.0] * (8 - k)} for k in (0, 0, 1, 1, 2, 3, 5, 8)]
    population = tmp_path / "binary.json"
    population.write_text(json.dumps({"per_prompt": per_prompt}))
    sc = _explore_scenario(max_hours=4.0)
    flat = LearningModel(baseline_iterations=20, prompts_file=str(population), live_exponent=0.0)
    live = dataclasses.replace(flat, live_exponent=1.0, rank_preservation=1.0)
    grpo = Simulation(sc, SYSTEMS["on_demand_grpo"], None, learning=flat).run()
    assert grpo.iterations == 20
    # best of 16 on fresh weights leaves fewer groups dead than 4 random seeds: fewer iterations
    cp = Simulation(sc, SYSTEMS["on_demand_critical_path"], None, learning=live).run()
    shares = [p["live_share"] for p in cp.timeline]
    assert cp.reached and cp.iterations < 20 and np.mean(shares) > 0.7
    plain = [p["live_share"] for p in grpo.timeline]
    assert np.mean(plain) < np.mean(shares)
    # following a saturating level, plain GRPO's groups die as the reward nears 1
    rising = dataclasses.replace(flat, follow_level=True, initial=0.3, target=0.97)
    r = Simulation(sc, SYSTEMS["on_demand_grpo"], None, learning=rising).run()
    early = np.mean([p["live_share"] for p in r.timeline[:5]])
    late = np.mean([p["live_share"] for p in r.timeline[-5:]])
    assert r.iterations == 20 and late < early
    with pytest.raises(ValueError, match="follow_level needs"):
        LearningModel(follow_level=True, reward_draws="empirical")
    with pytest.raises(ValueError, match="signal must be one of"):
        LearningModel(signal="std")


def test_trace_windows_run_spot_systems_from_several_starts_and_report_the_median(tmp_path):
    from spotlight.scheduling.traces import load_trace
    from spotlight.sim.sim_report import simulate, window_offsets_s

    names = ["on_demand_grpo", "spotlight"]
    one = simulate("small", None, tmp_path / "one", systems=names)
    s = simulate("small", None, tmp_path / "w", systems=names, trace_windows=3)
    w = s["trace_windows"]
    assert w["n"] == 3 and set(w["by_system"]) == {"spotlight"}  # on-demand: no trace, one run
    times = w["by_system"]["spotlight"]["time_to_target_h"]["values"]
    assert times[0] == one["systems"]["spotlight"]["time_to_target_h"]  # window 0: the default
    assert s["systems"]["spotlight"]["time_to_target_h"] == sorted(times)[1]  # the median one
    assert times[w["median_window"]] == sorted(times)[1]
    assert s["systems"]["on_demand_grpo"] == one["systems"]["on_demand_grpo"]
    trace = load_trace(SCENARIOS["small"].trace)
    offsets = window_offsets_s(trace, 3)
    assert offsets[0] == 0.0 and w["offsets_h"] == [o / 3600 for o in offsets]
    assert "Trace windows: 3 starts" in (tmp_path / "w" / "report.md").read_text()
    with pytest.raises(ValueError, match="trace_windows"):
        simulate("small", None, tmp_path / "x", systems=names, trace_windows=0)


def test_ablations_run_on_spotlights_median_window_unless_asked_for_every_window(tmp_path):
    from spotlight.sim.sim_report import simulate

    names = ["spotlight", "spot_grpo", "ablation_push"]
    median = simulate("small", None, tmp_path / "m", systems=names, trace_windows=3)
    every = simulate(
        "small", None, tmp_path / "a", systems=names, trace_windows=3, ablation_windows="all"
    )
    assert set(median["trace_windows"]["by_system"]) == {"spotlight", "spot_grpo"}
    assert set(every["trace_windows"]["by_system"]) == set(names)
    # the median window's ablation is the same run either way, and so is everything else
    assert median["systems"] == every["systems"] and median["ratios"] == every["ratios"]
    assert list(median["systems"]) == names  # in the order asked
    with pytest.raises(ValueError, match="ablation_windows"):
        simulate("small", None, tmp_path / "x", systems=names, ablation_windows="some")


def test_an_exploration_budget_below_the_candidates_makes_the_planner_choose():
    sc = dataclasses.replace(SMALL, max_hours=1.0)
    trace = load_trace(SMALL.trace)

    def contrasts(system: str, budget: int | None) -> list[float]:
        s = dataclasses.replace(sc, explore_budget=budget)
        return [row["contrast"] for row in Simulation(s, SYSTEMS[system], trace).run().timeline]

    plain = contrasts("spot_grpo", None)
    assert contrasts("spotlight", 0) == plain  # no budget: nothing explored, plain rollouts
    full = contrasts("spotlight", None)
    one_prompt = contrasts("spotlight", sc.explore_candidates)  # one prompt's candidates
    assert full != plain and one_prompt not in (plain, full)
    assert sum(one_prompt) / len(one_prompt) < sum(full) / len(full)


def _plain_queue_use(monkeypatch):
    """Make Simulation pull for every idle group after every event and submit every phase at
    once (what the skipped pulls and held-back items stand in for)."""

    def pull(self, gid, pool):
        return self.queue.pull(f"g{gid}", 1, self.t, pool=pool)

    def submit(self, items):
        self.queue.submit(items, now=self.t)

    monkeypatch.setattr(Simulation, "_pull", pull)
    monkeypatch.setattr(Simulation, "_submit", submit)
    monkeypatch.setattr(Simulation, "_takeable_now", lambda self: (True, True))


@pytest.mark.parametrize("hard_share", [0.0, 0.5])
def test_skipped_pulls_and_held_back_items_change_no_result(monkeypatch, hard_share):
    # capacity that churns every few minutes, empty stretches past the spill wait included
    counts = (4, 2, 0, 3, 1, 4, 0, 0, 2, 4, 3, 0)
    trace = CapacityTrace("churn", tuple(200.0 * k for k in range(len(counts))), counts, 2400.0)
    sc = dataclasses.replace(
        SMALL, max_hours=1.5, overheads=dataclasses.replace(SMALL.overheads, hard_share=hard_share)
    )
    names = [
        "on_demand_critical_path",
        "spot_grpo",
        "spotlight",
        "ablation_no_trainer_samples",
        "spotlight_pipelined",
    ]

    def runs():
        out = []
        for name in names:
            r = Simulation(sc, SYSTEMS[name], trace, seed=3).run()
            out.append((r.summary(), r.timeline, r.preemption_times_h))
        return out

    fast = runs()
    spot = [s for s, _, _ in fast[1:]]
    assert all(s["preemptions"] > 0 for s in spot) and any(s["spill_launches"] for s in spot)
    with monkeypatch.context() as m:
        _plain_queue_use(m)
        assert runs() == fast


def test_simulate_in_worker_processes_gives_the_serial_results(tmp_path):
    from spotlight.sim.sim_report import simulate

    names = ["on_demand_grpo", "spot_grpo", "spotlight"]
    kw = dict(systems=names, trace_windows=2)
    serial = simulate("small", None, tmp_path / "one", workers=1, **kw)
    parallel = simulate("small", None, tmp_path / "two", workers=2, **kw)
    assert parallel == serial
    with pytest.raises(ValueError, match="workers"):
        simulate("small", None, tmp_path / "x", systems=names, workers=0)


def _pipelined_run(system: str, train_step_s: float, prompts: int, **learning):
    """Two spot sampler GPUs (always there) and two trainer GPUs; items of 2 samples x 2 steps
    at 1 s a sample-step (4 s, after a 2 s weights pick-up when the version changes); the update
    trains ``prompts`` x 2 samples x 1 step at ``train_step_s`` over the 2 trainer GPUs. No
    exploration budget (``explore_budget=0``): the rollouts are the plain ``prompts`` x 2."""
    sc = _hand_scenario(
        trainer_gpus=2,
        sampler_gpus=2,
        prompts_per_iteration=prompts,
        explore_budget=0,
        max_hours=1.0,
        step_costs=StepCosts(sample_step_s=1.0, train_step_s=train_step_s, model_gb=1.0),
        overheads=Overheads(weights_broadcast_s=2.0, replica_start_s=0.0, spill_wait_s=1e6),
    )
    steady = CapacityTrace("steady", (0.0,), (2,), 10**6)
    learn = LearningModel(**{"baseline_iterations": 6, "live_exponent": 0.0, **learning})
    r = Simulation(sc, SYSTEMS[system], steady, learning=learn).run()
    t = [0.0] + [p["t_h"] * 3600 for p in r.timeline]
    return r, [b - a for a, b in itertools.pairwise(t)]


def test_pipelined_spotlight_samples_the_next_rollout_during_the_update():
    # update: 4 prompts x 2 samples x 4 s / 2 GPUs = 16 s; a rollout: 4 items on the 2 spot
    # samplers, 2 each = 8 s, after the 2 s pick-up of the weights before the update
    pipe, gaps = _pipelined_run("spotlight_pipelined", train_step_s=4.0, prompts=4)
    assert pipe.reached and pipe.iterations == 6
    assert pipe.ledger.held_s["spot"] == pytest.approx(2 * pipe.wall_h * 3600)
    # the first rollout fills the pipeline on all 4 GPUs: the trainer's groups (holding the
    # weights) take 2 items at once (4 s), the samplers the other 2 after their pick-up (6 s);
    # then every iteration is the update alone: max(16, 2 + 8), not their sum
    assert gaps == pytest.approx([6 + 16] + [16.0] * 5)
    # Spotlight's sync schedule samples each rollout (6 s, the same 4 GPUs) and then updates
    sync, sync_gaps = _pipelined_run("spotlight", train_step_s=4.0, prompts=4)
    assert sync.iterations == 6 and sync_gaps == pytest.approx([6 + 16] * 6)
    assert pipe.time_to_target_h < sync.time_to_target_h
    # without oversampling (no budget here either way) the ablation runs the same schedule
    _, plain_gaps = _pipelined_run("ablation_pipelined_no_oversampling", 4.0, prompts=4)
    assert plain_gaps == pytest.approx(gaps)


def test_the_trainer_gpus_sample_what_is_left_of_a_rollout_behind_its_update():
    # update: 8 prompts x 2 x 1 s / 2 = 8 s; a rollout of 8 items on the 2 samplers alone:
    # 2 s pick-up + 4 rounds of 4 s = 18 s. With the trainer: at 8 s the update ends and the
    # trainer's 2 groups (keeping the rollout's weights: no pick-up) take 2 of the 4 items
    # left, done at 12 s; the samplers finish their second round at 10 s and take the other
    # 2: done at 14 s
    alone, alone_gaps = _pipelined_run("ablation_pipelined_no_trainer_samples", 1.0, prompts=8)
    joined, joined_gaps = _pipelined_run("spotlight_pipelined", train_step_s=1.0, prompts=8)
    assert alone_gaps[1:-1] == pytest.approx([18.0] * 4)
    assert joined_gaps[1:-1] == pytest.approx([14.0] * 4)
    assert joined.time_to_target_h < alone.time_to_target_h
    # the last update starts no rollout: it ends the run
    assert [alone_gaps[-1], joined_gaps[-1]] == pytest.approx([8.0, 8.0])
    # the trainer's GPUs are held (and billed) once; their sampling is on-demand work
    for r in (alone, joined):
        assert r.ledger.held_s["on_demand"] == pytest.approx(2 * r.wall_h * 3600)
    update_gpu_s = 8.0 * 2 * joined.iterations
    assert alone.ledger.busy_s["on_demand"] == pytest.approx(update_gpu_s)
    assert joined.ledger.busy_s["on_demand"] > update_gpu_s + 4 * 4 * 2  # >= 2 items a rollout
    assert joined.ledger.cost_usd() < alone.ledger.cost_usd()


def test_pipelined_progress_is_scaled_by_the_staleness_factor():
    # every iteration counts 1 (exponent 0); every stale one (all but the first) x the factor
    on, _ = _pipelined_run("spotlight_pipelined", 4.0, prompts=4, baseline_iterations=10)
    half, _ = _pipelined_run(
        "spotlight_pipelined", 4.0, prompts=4, baseline_iterations=10, async_staleness_factor=0.5
    )
    assert on.iterations == 10
    assert half.reached and half.iterations == 19  # 1 + 0.5 x 18 >= 10 > 1 + 0.5 x 17
    assert half.time_to_target_h > on.time_to_target_h
    # the factor is the one-step-stale schedules' alone: Spotlight's sync one is on-policy
    sync, _ = _pipelined_run(
        "spotlight", 4.0, prompts=4, baseline_iterations=10, async_staleness_factor=0.5
    )
    assert sync.iterations == 10


def test_oversampling_the_pipelined_rollout_rescues_dead_groups(tmp_path):
    # a binary population where most prompts rarely succeed: many random groups of 4 are dead
    per_prompt = [{"rewards": [1.0] * k + [0.0] * (8 - k)} for k in (0, 0, 1, 1, 2, 3, 5, 8)]
    population = tmp_path / "binary.json"
    population.write_text(json.dumps({"per_prompt": per_prompt}))
    # 8 spot samplers at 0.5 samples/s each; the update of 8 prompts x 4 samples takes 32 s:
    # 4 x 32 = 128 seeds in the update's time, 96 once the rollout's 32 are drawn: 12
    # candidates for each of the 8 prompts in place of their 4
    sc = dataclasses.replace(
        _explore_scenario(max_hours=4.0),
        sampler_gpus=8,
        overheads=Overheads(weights_broadcast_s=2.0, replica_start_s=0.0, spill_wait_s=1e6),
    )
    steady = CapacityTrace("steady", (0.0,), (8,), 10**6)
    learn = LearningModel(baseline_iterations=20, prompts_file=str(population), live_exponent=1)
    runs = {
        name: Simulation(sc, SYSTEMS[name], steady, learning=learn).run()
        for name in ("spotlight_pipelined", "ablation_pipelined_no_oversampling")
    }
    over, plain = runs["spotlight_pipelined"], runs["ablation_pipelined_no_oversampling"]
    assert over.reached and plain.reached

    def mean(r, key: str) -> float:  # iteration 0 fills the pipeline: no candidates there
        return float(np.mean([p[key] for p in r.timeline[1:]]))

    assert mean(over, "live_share") > mean(plain, "live_share") + 0.1
    assert mean(over, "contrast") > mean(plain, "contrast")
    assert over.iterations < plain.iterations
    # the candidates are sampled, on the spot GPUs (about twice the plain rollout's busy time)
    spot_per_iteration = [r.ledger.busy_s["spot"] / r.iterations for r in (over, plain)]
    assert spot_per_iteration[0] > 1.5 * spot_per_iteration[1]


def _dead_population(tmp_path) -> str:
    """A binary population where most prompts rarely succeed: many random groups are dead."""
    per_prompt = [{"rewards": [1.0] * k + [0.0] * (8 - k)} for k in (0, 0, 1, 1, 2, 3, 5, 8)]
    path = tmp_path / "binary.json"
    path.write_text(json.dumps({"per_prompt": per_prompt}))
    return str(path)


@pytest.mark.parametrize("flaky", [False, True], ids=["steady", "preempted"])
def test_pipelined_candidates_never_make_an_iteration_end_later(tmp_path, flaky):
    """Candidates beyond a prompt's G only use the update time the rollout leaves: every
    iteration of ``spotlight_pipelined`` ends when the same pipeline's without candidates
    does, whatever the trace, so it reaches the target no later."""
    # 2 trainer GPUs, spot samplers of 1 GPU at 0.5 samples/s each (items of 2 samples x 2
    # steps, 4 s), a 6 s weights pick-up; the update of 4 prompts x G=2 takes 20 s
    sc = _hand_scenario(
        trainer_gpus=2,
        sampler_gpus=4 if flaky else 2,
        gpus_per_node=1,
        prompts_per_iteration=4,
        explore_budget=None,
        max_hours=1.0,
        step_costs=StepCosts(sample_step_s=1.0, train_step_s=5.0, model_gb=1.0),
        overheads=Overheads(
            weights_broadcast_s=6.0,
            replica_start_s=3.0,
            spill_wait_s=1e6,
            hard_share=0.5,
            notice_s=5.0,
        ),
    )
    trace = (
        CapacityTrace("flaky", (0.0, 47.0, 95.0, 133.0, 170.0, 260.0), (4, 1, 3, 0, 2, 4), 300.0)
        if flaky
        else CapacityTrace("steady", (0.0,), (2,), 10**6)
    )
    learn = LearningModel(
        baseline_iterations=12, prompts_file=_dead_population(tmp_path), live_exponent=1
    )
    over, plain = (
        Simulation(sc, SYSTEMS[name], trace, learning=learn, seed=1).run()
        for name in ("spotlight_pipelined", "ablation_pipelined_no_oversampling")
    )
    ends = [[p["t_h"] * 3600 for p in r.timeline] for r in (over, plain)]
    assert ends[0] == pytest.approx(ends[1][: len(ends[0])])
    assert over.reached and over.time_to_target_h <= plain.time_to_target_h
    assert over.iterations < plain.iterations  # the candidates that finished rescued groups
    if flaky:
        assert over.preemptions > 0 and over.notices > 0
    else:
        # at the update's start the 2 samplers draw 1 sample/s: 20 seeds in the update, 12
        # once the rollout's 8 are drawn. Sampled as rollout work (the rule before), the
        # candidates ran past the update: 6 s pick-up + 4 rounds of 4 s = 22 s an iteration.
        # Optional, they take the 20 - 14 s the rollout leaves, and end with the update.
        assert [b - a for a, b in itertools.pairwise(ends[0])] == pytest.approx(
            [20.0] * (over.iterations - 1)
        )


def test_pipelined_systems_and_their_ablations_are_defined_and_checked():
    pipe = SYSTEMS["spotlight_pipelined"]
    assert (pipe.samplers, pipe.exploration, pipe.pipeline, pipe.trainer_samples) == (
        "spot",
        "oversample",
        "pipelined",
        True,
    )
    assert SYSTEMS["ablation_pipelined_no_oversampling"].exploration == "off"
    assert not SYSTEMS["ablation_pipelined_no_trainer_samples"].trainer_samples
    assert SYSTEMS["spotlight"].pipeline == "separate"  # the sync schedule stays
    with pytest.raises(ValueError, match="explores with one of"):
        dataclasses.replace(pipe, exploration="spot")
    with pytest.raises(ValueError, match="explores with one of"):
        dataclasses.replace(SYSTEMS["spotlight"], exploration="oversample")


def test_the_trainers_pulls_do_not_hold_the_fallback_back():
    # No spot capacity ever: Spotlight's trainer GPU samples every rollout, the fallback joins
    # once items waited 30 s (16 items of 2 samples x 2 steps at 1 s: 4 s each, 2 s pick-up).
    # The trainer pulls as pool trainer, no sign of spot life, so from the second rollout on
    # the fallback (kept: spot never returns) takes items at once: the trainer holds the
    # weights and finishes one every 4 s from 0, the fallback after its pick-up every 4 s from
    # 6; 16 items by 34 s, then the 32 s update. (Pulling as spot, the trainer would make the
    # fallback wait 30 s of every rollout.)
    sc = _hand_scenario(
        prompts_per_iteration=16,
        max_hours=1.0,
        overheads=Overheads(weights_broadcast_s=2.0, replica_start_s=0.0, spill_wait_s=30.0),
    )
    none = CapacityTrace("none", (0.0,), (0,), 3600.0)
    learn = LearningModel(baseline_iterations=4, live_exponent=0.0)
    r = Simulation(sc, SYSTEMS["spotlight"], none, learning=learn).run()
    t = [0.0] + [p["t_h"] * 3600 for p in r.timeline]
    # the first rollout: the trainer alone for 30 s (7 items, the 8th ends at 32), then both:
    # 48 s, and the update
    assert [b - a for a, b in itertools.pairwise(t)] == pytest.approx([48 + 32] + [34 + 32] * 3)
    assert r.spill_launches == 1


def test_pipelined_spotlight_runs_on_every_window_and_its_ablations_on_the_median(tmp_path):
    from spotlight.sim.sim_report import simulate

    names = ["spotlight", "spotlight_pipelined", "ablation_pipelined_no_oversampling"]
    s = simulate("small", None, tmp_path / "w", systems=names, trace_windows=3)
    w = s["trace_windows"]
    assert set(w["by_system"]) == {"spotlight", "spotlight_pipelined"}
    # the summary shows Spotlight's median window, for the pipelined system too
    times = w["by_system"]["spotlight_pipelined"]["time_to_target_h"]["values"]
    assert len(times) == 3
    assert s["systems"]["spotlight_pipelined"]["time_to_target_h"] == times[w["median_window"]]
    assert "spotlight_pipelined" in s["ratios"]
