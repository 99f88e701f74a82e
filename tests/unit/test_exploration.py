"""Exploration bookkeeping: candidate seeds, its work items, the selection, rank preservation."""

from __future__ import annotations

import math

import pytest

from spotlight.explore.exploration import (
    Exploration,
    candidate_seeds,
    rank_preservation,
    select_groups,
)
from spotlight.scheduling.work_queue import ItemResult


def _exp(plan=None, version=3) -> Exploration:
    plan = {"a": 5, "b": 0, "c": 3} if plan is None else plan
    return Exploration(7, version, ["a", "b", "c"], plan, budget=sum(plan.values()))


def test_candidate_seeds_are_a_fixed_stream_per_run_iteration_and_prompt():
    assert candidate_seeds(0, 7, 1, 6) == candidate_seeds(0, 7, 1, 6)
    assert candidate_seeds(0, 7, 1, 6)[:3] == candidate_seeds(0, 7, 1, 3)  # a prefix
    assert candidate_seeds(0, 7, 1, 6) != candidate_seeds(0, 7, 2, 6)
    assert candidate_seeds(0, 7, 1, 6) != candidate_seeds(0, 8, 1, 6)
    assert candidate_seeds(0, 7, 1, 6) != candidate_seeds(1, 7, 1, 6)
    assert all(0 <= s < 2**31 - 1 for s in candidate_seeds(0, 7, 1, 100))


def test_work_items_cover_the_plan_in_batches_on_the_exploration_weights():
    exp = _exp()
    items = exp.work_items(cfg_seed=0, batch_size=2)
    assert [i.item_id for i in items] == [
        "e7-v3-p0-0", "e7-v3-p0-1", "e7-v3-p0-2", "e7-v3-p2-0", "e7-v3-p2-1",
    ]  # fmt: skip
    assert [len(i.seeds) for i in items] == [2, 2, 1, 2, 1]
    assert all(i.kind == "explore" and i.iteration == 7 and i.weights_version == 3 for i in items)
    assert [s for i in items[:3] for s in i.seeds] == candidate_seeds(0, 7, 0, 5)
    assert items[3].prompts == ("c", "c") and "b" not in exp.items  # planned 0: no item
    assert exp.seeds["c"] == candidate_seeds(0, 7, 2, 3)
    assert exp.all_item_ids() == [i.item_id for i in items]


def test_candidates_start_from_their_groups_noise_when_groups_share_it():
    exp = Exploration(7, 3, ["a", "b", "c"], {"a": 3, "c": 2}, budget=5, init_seeds=[11, 22, 33])
    items = exp.work_items(cfg_seed=0, batch_size=2)
    assert [i.init_seeds for i in items] == [(11, 11), (11,), (33, 33)]
    assert all(i.init_seeds is None for i in _exp().work_items(0, 2))


def _finished(exp: Exploration, rewards: dict[str, list[float]], batch: int, skip=()):
    items = exp.work_items(0, batch)
    out, left = {}, {p: list(r) for p, r in rewards.items()}
    for item in items:
        p = item.prompts[0]
        part, left[p] = left[p][: len(item.seeds)], left[p][len(item.seeds) :]
        if item.item_id not in skip:
            trajs = [f"{p}{s}".encode() for s in item.seeds]
            out[item.item_id] = ItemResult(item.item_id, "w", "spot", part, trajectories=trajs)
    return out


def test_a_finished_prompt_gets_its_max_variance_seeds_and_an_unfinished_one_falls_back():
    exp = _exp()
    rewards = {"a": [0.5, 0.0, 0.4, 1.0, 0.6], "c": [0.2, 0.3, 0.9]}
    results = _finished(exp, rewards, batch=2, skip={"e7-v3-p2-1"})  # c's last item unfinished
    sel = select_groups(
        exp, results, group=2, fresh_version=4, max_staleness=2, keep_trajectories=True
    )
    assert sel.seeds == {"a": [exp.seeds["a"][1], exp.seeds["a"][3]]}  # the rewards 0.0 and 1.0
    assert sel.selected_rewards == {"a": [0.0, 1.0]}
    assert sel.explored == {"a": rewards["a"]}
    assert sel.fallback_prompts == 1
    assert sel.seeds_explored == 5 + 2  # every finished sample counts, used or not
    s = exp.seeds["a"]
    assert sel.trajectories == {"a": [f"a{s[1]}".encode(), f"a{s[3]}".encode()]}
    m = sel.metrics()
    assert m["explore_prompts"] == 1 and m["explore_fallback_prompts"] == 1
    assert m["explored_selected_group_std"] == pytest.approx(0.5)
    assert m["explored_random_group_std"] == pytest.approx(0.25)  # the first 2 explored: .5, 0


def test_rescue_keeps_the_first_seeds_of_a_live_prompt_and_rescues_a_dead_one():
    exp = _exp()
    rewards = {"a": [0.0, 0.0, 0.4, 1.0, 0.6], "c": [0.2, 0.3, 0.9]}
    results = _finished(exp, rewards, batch=8)
    sel = select_groups(exp, results, 2, fresh_version=4, max_staleness=2, rule="rescue")
    assert sel.seeds["c"] == exp.seeds["c"][:2]  # live first two (0.2, 0.3): kept as drawn
    assert sel.selected_rewards == {"a": [0.0, 1.0], "c": [0.2, 0.3]}  # a's dead 0, 0 rescued
    default = select_groups(exp, results, 2, fresh_version=4, max_staleness=2)
    assert default.selected_rewards["c"] == [0.2, 0.9]  # max variance


def test_exploration_on_weights_too_stale_is_not_used():
    exp = _exp(version=3)
    results = _finished(exp, {"a": [0.0, 1.0, 0.5, 0.5, 0.5], "c": [0.0, 1.0, 0.5]}, batch=8)
    fresh_enough = select_groups(exp, results, 2, fresh_version=5, max_staleness=2)
    assert set(fresh_enough.seeds) == {"a", "c"} and fresh_enough.fallback_prompts == 0
    too_stale = select_groups(exp, results, 2, fresh_version=6, max_staleness=2)
    assert too_stale.seeds == {} and too_stale.fallback_prompts == 2
    assert too_stale.trajectories == {}  # kept only when asked for
    assert math.isnan(too_stale.metrics()["explored_selected_group_std"])


def test_rank_preservation_is_the_mean_spearman_over_prompts_that_vary():
    stale = {"a": [0.1, 0.5, 0.9], "b": [0.9, 0.5, 0.1], "flat": [0.3, 0.3, 0.3], "gone": [1, 2]}
    fresh = {"a": [0.2, 0.4, 0.8], "b": [0.1, 0.6, 0.8], "flat": [0.1, 0.2, 0.3]}
    assert rank_preservation(stale, fresh) == pytest.approx((1.0 + -1.0) / 2)
    assert math.isnan(rank_preservation({"flat": [0.3, 0.3]}, {"flat": [0.1, 0.2]}))
    assert math.isnan(rank_preservation({}, {}))
