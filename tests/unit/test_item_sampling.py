"""Sampling one work item (spotlight/flow/item_sampling.py), shared by the sampler replicas and
the trainer's GPUs: commits every ``commit_every`` steps but never at the end, an early stop,
a resume from the committed state equal to an uninterrupted item, and what a result carries."""

import pytest
import torch

from spotlight.flow.item_sampling import checkpoint, item_result, run_item, start_item
from spotlight.flow.sampler import advance, sample
from spotlight.scheduling.work_queue import Kind, WorkItem

from .test_sampler import CFG, same


def _item(**kw) -> WorkItem:
    return WorkItem(
        item_id="i0", kind=Kind.ROLLOUT, iteration=3, weights_version=2,
        prompts=("a cat", "a dog"), seeds=(5, 9), **kw,
    )  # fmt: skip


def _stepper(policy, item):
    cond = policy.encode_prompts(list(item.prompts))

    def step(trajs):
        advance(policy, trajs, 1, cond)
        return trajs

    return step


def test_an_item_runs_to_the_end_and_commits_every_k_steps_but_not_at_the_end(small_policy):
    item = _item()
    commits = []
    trajs = start_item(item, small_policy.latent_shape, CFG)
    assert [t.step for t in trajs] == [0, 0] and trajs[0].weights_version == 2
    with torch.no_grad():
        trajs, finished = run_item(trajs, _stepper(small_policy, item), 2, commits.append)
    assert finished and all(t.done for t in trajs)
    assert [c.step for c in commits] == [2, 4]  # 6 steps: the end is completed, not committed
    whole = sample(small_policy, list(item.prompts), list(item.seeds), CFG, weights_version=2)
    assert all(same(a, b) for a, b in zip(trajs, whole, strict=True))


def test_a_stop_returns_the_trajectories_where_they_are(small_policy):
    item = _item()
    trajs = start_item(item, small_policy.latent_shape, CFG)
    asked = []

    def stop():
        asked.append(trajs[0].step)
        return len(asked) > 3  # stop before the fourth step

    with torch.no_grad():
        out, finished = run_item(trajs, _stepper(small_policy, item), 0, None, stop)
    assert not finished and out[0].step == 3 and not out[0].done
    at_once, finished = run_item(start_item(item, small_policy.latent_shape, CFG), None, 0,
                                 None, lambda: True)  # fmt: skip
    assert not finished and at_once[0].step == 0  # a stop before the first step: no step made


def test_an_item_resumed_from_its_checkpoint_ends_as_an_uninterrupted_one(small_policy):
    item = _item()
    step = _stepper(small_policy, item)
    with torch.no_grad():
        trajs = start_item(item, small_policy.latent_shape, CFG)
        for _ in range(4):
            trajs = step(trajs)
    ck = checkpoint(trajs)
    assert ck.step == 4 and len(ck.trajectories) == 2
    resumed = start_item(_item(resume=ck), small_policy.latent_shape, CFG)
    assert [t.step for t in resumed] == [4, 4]
    with torch.no_grad():
        resumed, finished = run_item(resumed, step)
        whole, _ = run_item(start_item(item, small_policy.latent_shape, CFG), step)
    assert finished and all(same(a, b) for a, b in zip(resumed, whole, strict=True))


def test_a_result_carries_trajectories_except_for_validation_which_carries_images(
    small_policy,
):
    item = _item()
    with torch.no_grad():
        trajs, _ = run_item(start_item(item, small_policy.latent_shape, CFG),
                            _stepper(small_policy, item))  # fmt: skip
    common = dict(worker_id="w", pool="spot", busy_s=1.5, resumed_from_step=2, images="imgs")
    rollout = item_result(item, trajs, [1, 0.5], **common)
    assert rollout.rewards == [1.0, 0.5] and isinstance(rollout.rewards[0], float)
    assert len(rollout.trajectories) == 2 and rollout.images is None
    assert (rollout.item_id, rollout.pool, rollout.resumed_from_step) == ("i0", "spot", 2)
    val = WorkItem("v0", Kind.VAL, 3, 2, item.prompts, item.seeds)
    scored = item_result(val, trajs, [0.0, 1.0], **common)
    assert scored.trajectories == [] and scored.images == "imgs"


def test_an_item_with_init_seeds_starts_as_the_sampler_does_with_them(small_policy):
    item = WorkItem("g0", Kind.ROLLOUT, 0, 2, ("a cat",) * 3, (5, 9, 4), init_seeds=(77,) * 3)
    trajs = start_item(item, small_policy.latent_shape, CFG)
    assert all(t.init_seed == 77 for t in trajs)
    assert torch.equal(trajs[0].latents, trajs[1].latents)  # one group, one initial noise
    with torch.no_grad():
        trajs, _ = run_item(trajs, _stepper(small_policy, item))
    whole = sample(small_policy, list(item.prompts), list(item.seeds), CFG, 2, init_seeds=[77] * 3)
    assert all(same(a, b) for a, b in zip(trajs, whole, strict=True))
    with pytest.raises(ValueError, match="2 init seeds for 3 seeds"):
        WorkItem("g1", Kind.ROLLOUT, 0, 2, ("a",) * 3, (1, 2, 3), init_seeds=(7, 7))
