"""Exploration's decisions for a run (budget, plan, selection, checkpoint state), without a
runner: the results are made up here, as a runner would hand them back."""

from __future__ import annotations

import dataclasses
import json

import pytest

from spotlight.config import ExplorationConfig
from spotlight.explore.exploration import Exploration
from spotlight.explore.strategy import ExplorationStrategy, pipelined_required_items
from spotlight.recipes import get_recipe
from spotlight.scheduling.work_queue import ItemResult, Kind


def _cfg(iterations: int = 3, **explore):
    cfg = get_recipe("tiny-smoke")
    x = ExplorationConfig(**{"mode": "spot", "max_candidates": 8, **explore})
    return dataclasses.replace(cfg, num_iterations=iterations, exploration=x)


def _results(exp, reward_of, batch_size: int = 4):
    """Every item of ``exp`` finished, seed ``s`` of prompt ``p`` scoring ``reward_of(p, s)``."""
    out = {}
    for item in exp.work_items(0, batch_size):
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


def _pipelined(**explore):
    cfg = _cfg(**explore)
    return dataclasses.replace(
        cfg, schedule="pipelined", sampler=dataclasses.replace(cfg.sampler, batch_size=2)
    )


def test_a_pipelined_rollout_waits_for_a_prompts_first_g_candidates_only():
    x = _cfg().exploration
    assert pipelined_required_items(x, 4, group=4, batch_size=2) == 2  # seeds 0-3
    assert pipelined_required_items(x, 4, group=3, batch_size=2) == 2  # seeds 0-3 hold 0-2
    assert pipelined_required_items(x, 1, group=4, batch_size=8) == 1
    fixed = _cfg(budget_seeds=16).exploration
    assert pipelined_required_items(fixed, 4, group=4, batch_size=2) == 4  # explored in full

    s = ExplorationStrategy(_pipelined())  # G = 4, items of 2 seeds
    exp = Exploration(1, 0, ["a", "b", "c"], {"a": 8, "b": 0, "c": 12})
    required, optional = s.pipelined_items(exp)
    assert [i.item_id for i in required] == [f"e1-v0-p{k}-{j}" for k in (0, 2) for j in (0, 1)]
    assert {i.kind for i in required} == {Kind.ROLLOUT}
    assert {i.kind for i in optional} == {Kind.EXPLORE} and len(optional) == 2 + 4
    assert [i.seeds for i in required[:2]] == [
        tuple(exp.seeds["a"][:2]),
        tuple(exp.seeds["a"][2:4]),
    ]

    # the update ended with a's first optional item done and none of c's: a selects among
    # its 6 finished candidates, c among its 4 (the rollout's own), no prompt falls back
    done = _results(exp, _binary, batch_size=2)
    kept = {i.item_id: done[i.item_id] for i in [*required, optional[0]]}
    sel, row = s.pipelined_selected(exp, kept)
    assert sel.fallback_prompts == 0 and set(sel.seeds) == {"a", "c"}
    assert len(sel.explored["a"]) == 6 and len(sel.explored["c"]) == 4
    assert set(sel.seeds["a"]) <= set(exp.seeds["a"][:6])
    assert sorted(sel.seeds["c"]) == sorted(exp.seeds["c"][:4])
    assert row["explore_budget_used"] == 10
    # a required item missing: that prompt is not selected
    del kept[required[-1].item_id]
    sel, _ = s.pipelined_selected(exp, kept)
    assert sel.fallback_prompts == 1 and set(sel.seeds) == {"a"}

    # a fixed budget: every candidate is rollout work, and the selection waits for all
    f = ExplorationStrategy(_pipelined(budget_seeds=16))
    required, optional = f.pipelined_items(exp)
    assert optional == [] and len(required) == 4 + 6
    sel, _ = f.pipelined_selected(exp, {i.item_id: done[i.item_id] for i in required[:-1]})
    assert sel.fallback_prompts == 1
    sel, _ = f.pipelined_selected(exp, done)
    assert sel.fallback_prompts == 0 and len(sel.explored["c"]) == 12
