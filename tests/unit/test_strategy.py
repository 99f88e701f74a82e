"""Exploration's decisions for a run (budget, plan, selection, checkpoint state), without a
runner: the results are made up here, as a runner would hand them back."""

from __future__ import annotations

import dataclasses
import json

import pytest

from spotlight.config import ExplorationConfig
from spotlight.explore.strategy import ExplorationStrategy
from spotlight.recipes import get_recipe
from spotlight.scheduling.work_queue import ItemResult


def _cfg(iterations: int = 3, **explore):
    cfg = get_recipe("tiny-smoke")
    x = ExplorationConfig(**{"mode": "spot", "max_candidates": 8, **explore})
    return dataclasses.replace(cfg, num_iterations=iterations, exploration=x)


def _results(exp, reward_of):
    """Every item of ``exp`` finished, seed ``s`` of prompt ``p`` scoring ``reward_of(p, s)``."""
    out = {}
    for item in exp.work_items(0, 4):
        rewards = [reward_of(p, s) for p, s in zip(item.prompts, item.seeds, strict=True)]
        trajs = [f"{p}:{s}".encode() for p, s in zip(item.prompts, item.seeds, strict=True)]
        out[item.item_id] = ItemResult(item.item_id, "w", "spot", rewards, trajectories=trajs)
    return out


def _binary(p, s):
    return float(s % 3 == 0)


def test_a_fixed_budget_is_explored_in_full_and_a_measured_one_follows_the_update_time():
    fixed = ExplorationStrategy(_cfg(budget_seeds=12))
    assert fixed.budget() == 12 and fixed.waits_for_all()
    capped = ExplorationStrategy(_cfg(budget_seeds=5000, max_seeds_per_iteration=100))
    assert capped.budget() == 100

    measured = ExplorationStrategy(_cfg(budget_scale=2.0))
    assert measured.budget() == 0 and not measured.waits_for_all()  # nothing measured yet
    measured.measured(sample_s=3.0, rate=4.0)  # before an update, the rollout's time
    assert measured.budget() == 24  # 2 x 3 s x 4 samples/s
    measured.trained(5.0)
    assert measured.budget() == 40
    measured.trained(1.0)  # an EMA of the update time: (5 + 1) / 2
    measured.measured(sample_s=9.0, rate=None)  # an unmeasurable rate keeps the last one
    assert measured.budget() == 24
    assert ExplorationStrategy(_cfg(mode="critical_path")).budget() == 1024  # as much as it takes


def test_spot_selects_the_next_iterations_seeds_once_and_only_for_the_next_iteration():
    s = ExplorationStrategy(_cfg(budget_seeds=16))
    assert s.explores_next(0) and s.explores_next(1) and not s.explores_next(2)
    assert s.take() == (None, {})  # nothing explored before the first update
    exp = s.plan(1, 1, ["a", "b"], None)
    assert exp.iteration == 1 and exp.weights_version == 1 and sum(exp.plan.values()) == 16
    results = _results(exp, _binary)
    s.spot_explored(exp, results, fresh_version=2)
    sel, extra = s.take()
    group = s.cfg.grpo.group_size
    for p in ("a", "b"):
        kept = [_binary(p, x) for x in sel.seeds[p]]
        assert len(kept) == group and kept == sel.selected_rewards[p]
        assert set(sel.seeds[p]) <= set(exp.seeds[p])
    assert extra["explore_weights_version"] == 1 and extra["explore_budget_used"] == 16
    assert extra["explored_selected_group_std"] >= extra["explored_random_group_std"]
    assert s.take() == (None, {})  # used once
    # The planner learned from every explored prompt.
    assert s.planner.to_dict()["arms"]


def test_spot_exploration_too_stale_falls_back_to_random_seeds():
    s = ExplorationStrategy(_cfg(budget_seeds=16, max_staleness=1))
    exp = s.plan(1, 1, ["a", "b"], None)
    s.spot_explored(exp, _results(exp, _binary), fresh_version=3)
    sel, extra = s.take()
    assert sel.seeds == {} and extra["explore_fallback_prompts"] == 2


def test_the_rollout_teaches_the_planner_and_is_compared_with_the_stale_rewards():
    s = ExplorationStrategy(_cfg(budget_seeds=16))
    exp = s.plan(1, 1, ["a", "b"], None)
    s.spot_explored(exp, _results(exp, lambda p, x: (x % 97) / 97), fresh_version=2)
    sel, extra = s.take()
    same = [(p, list(sel.selected_rewards[p])) for p in ("a", "b")]
    assert s.rollout_scored(same, sel, extra) is None  # no pooled advantages: the kept G
    assert extra["rank_spearman_stale_fresh"] == pytest.approx(1.0)
    flipped = [(p, [-r for r in rs]) for p, rs in same]
    s.rollout_scored(flipped, sel, extra)
    assert extra["rank_spearman_stale_fresh"] == pytest.approx(-1.0)
    learned = s.planner.to_dict()
    off = ExplorationStrategy(_cfg(mode="off"))
    extra = {}
    assert off.rollout_scored(same, None, extra) is None and extra == {}
    assert learned != ExplorationStrategy(_cfg(budget_seeds=16)).planner.to_dict()


def test_pooled_advantages_normalize_each_group_by_all_its_candidates():
    s = ExplorationStrategy(_cfg(mode="critical_path", budget_seeds=16, pool_advantages=True))
    exp = s.plan(0, 0, ["a", "b"], None)
    sel, extra = s.critical_path_explored(exp, _results(exp, _binary))
    kept = [(p, list(sel.selected_rewards[p])) for p in ("a", "b")]
    assert s.rollout_scored(kept, sel, extra) == [sel.explored["a"], sel.explored["b"]]
    assert len(sel.explored["a"]) == 8 and "rank_spearman_stale_fresh" not in extra


def test_the_critical_path_keeps_the_selected_trajectories_of_its_own_weights():
    s = ExplorationStrategy(_cfg(mode="critical_path", budget_seeds=16))
    assert not s.explores_next(0)
    exp = s.plan(0, 0, ["a", "b"], [5, 6])
    assert exp.init_seeds == [5, 6]
    sel, extra = s.critical_path_explored(exp, _results(exp, _binary))
    for p in ("a", "b"):
        assert sel.trajectories[p] == [f"{p}:{x}".encode() for x in sel.seeds[p]]
    assert extra["explore_budget_predicted"] == 16 and "explore_weights_version" not in extra


def test_the_next_selection_survives_a_checkpoint_as_json():
    s = ExplorationStrategy(_cfg(budget_seeds=16))
    assert s.state() is None
    exp = s.plan(1, 1, ["a", "b"], None)
    s.spot_explored(exp, _results(exp, _binary), fresh_version=2)
    saved = json.loads(json.dumps(s.state()))
    resumed = ExplorationStrategy(_cfg(budget_seeds=16))
    resumed.load_state(saved)
    assert resumed.take() == s.take()
    resumed.load_state(None)
    assert resumed.take() == (None, {})
