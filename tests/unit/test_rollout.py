"""An iteration's rollout as data: seeds chosen in place, what is sampled, results in order."""

from __future__ import annotations

import pytest

from spotlight.training.rollout import chunks, plan_rollout

PROMPTS = ["a"] * 3 + ["b"] * 3 + ["c"] * 3
SEEDS = [1, 2, 3, 4, 5, 6, 7, 8, 9]


def test_without_exploration_every_seed_is_sampled_in_batch_order():
    plan = plan_rollout(PROMPTS, SEEDS, 3)
    assert plan.prompts == ("a", "b", "c") and plan.seeds == tuple(SEEDS)
    assert plan.to_sample == list(zip(PROMPTS, SEEDS, strict=True))
    assert plan.assemble(list(range(9)), {}) == list(range(9))


def test_chosen_seeds_replace_the_random_ones_and_reused_prompts_are_not_sampled():
    plan = plan_rollout(
        PROMPTS, SEEDS, 3, chosen={"b": [40, 50, 60], "c": [70, 80, 90]}, reused={"b"}
    )
    assert plan.seeds == (1, 2, 3, 40, 50, 60, 70, 80, 90)
    assert plan.to_sample == [("a", 1), ("a", 2), ("a", 3), ("c", 70), ("c", 80), ("c", 90)]
    # sampled values of a and c, b's from the exploration that sampled it: back in batch order
    got = plan.assemble(["a1", "a2", "a3", "c1", "c2", "c3"], {"b": ["b1", "b2", "b3"]})
    assert got == ["a1", "a2", "a3", "b1", "b2", "b3", "c1", "c2", "c3"]


def test_plans_and_assembly_refuse_what_does_not_fit():
    with pytest.raises(ValueError, match="not groups of 3"):
        plan_rollout(PROMPTS[:8], SEEDS[:8], 3)
    with pytest.raises(ValueError, match="one prompt"):
        plan_rollout(["a", "b", "a"] * 3, SEEDS, 3)
    with pytest.raises(ValueError, match="2 chosen seeds"):
        plan_rollout(PROMPTS, SEEDS, 3, chosen={"a": [1, 2]})
    with pytest.raises(ValueError, match="not in the batch"):
        plan_rollout(PROMPTS, SEEDS, 3, reused={"z"})
    plan = plan_rollout(PROMPTS, SEEDS, 3, reused={"a"})
    with pytest.raises(ValueError, match="5 sampled values for 6"):
        plan.assemble([0] * 5, {"a": [0, 0, 0]})
    with pytest.raises(ValueError, match="2 reused values"):
        plan.assemble([0] * 6, {"a": [0, 0]})


def test_chunks_cut_samples_into_items_in_order():
    samples = [("a", 1), ("a", 2), ("b", 3), ("b", 4), ("c", 5)]
    assert chunks(samples, 2) == [
        (("a", "a"), (1, 2), None), (("b", "b"), (3, 4), None), (("c",), (5,), None),
    ]  # fmt: skip
    assert chunks([], 4) == []
    with pytest.raises(ValueError, match="batch_size"):
        chunks(samples, 0)
    init = [10, 10, 20, 20, 30]
    assert [c[2] for c in chunks(samples, 2, init)] == [(10, 10), (20, 20), (30,)]
    with pytest.raises(ValueError, match="4 init seeds for 5"):
        chunks(samples, 2, init[:4])


def test_groups_sharing_their_noise_keep_their_init_seed_through_the_plan():
    init = [100] * 3 + [200] * 3 + [300] * 3  # as iteration_batch gives them: one per group
    plan = plan_rollout(
        PROMPTS, SEEDS, 3, chosen={"b": [40, 50, 60]}, reused={"a"}, init_seeds=init
    )
    assert plan.init_seeds == (100, 200, 300)
    assert plan.to_sample == [("b", 40), ("b", 50), ("b", 60), ("c", 7), ("c", 8), ("c", 9)]
    assert plan.to_sample_init == [200, 200, 200, 300, 300, 300]  # "a" reused: not sampled
    assert plan_rollout(PROMPTS, SEEDS, 3).to_sample_init is None
    with pytest.raises(ValueError, match="8 init seeds for 9"):
        plan_rollout(PROMPTS, SEEDS, 3, init_seeds=init[:8])
