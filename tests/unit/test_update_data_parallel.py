"""Data-parallel GRPO update: two ranks with averaged gradients equal one full-batch update."""

import copy
import threading

import pytest
import torch

from spotlight.config import GRPOConfig, SamplerConfig
from spotlight.flow.grpo import group_advantages
from spotlight.flow.sampler import sample
from spotlight.flow.update import grpo_update


class _ThreadAllReduce:
    """Gradient mean across threads (a stand-in for torch.distributed's all-reduce)."""

    def __init__(self, world):
        self.world = world
        self.barrier = threading.Barrier(world)
        self.slots = [None] * world

    def for_rank(self, rank):
        def sync(params):
            self.slots[rank] = [
                p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params
            ]
            self.barrier.wait()
            mean = [sum(gs) / self.world for gs in zip(*self.slots, strict=True)]
            self.barrier.wait()
            for p, g in zip(params, mean, strict=True):
                p.grad = g

        return sync


def run_ranks(policies, update):
    """``update(rank, policy, grad_sync)`` for each policy on a thread of its own, gradients
    averaged across them by ``grad_sync``; fails on the first error a rank raised."""
    reduce = _ThreadAllReduce(len(policies))
    errors = []

    def run(rank):
        try:
            update(rank, policies[rank], reduce.for_rank(rank))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
            reduce.barrier.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(policies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


# passes: prompt encodings per sample on a rank. nft: 2 draws, plus v_old of the second of the
# two chunks (2 draws x half the samples): 2 + 1 = 3.
@pytest.mark.parametrize(("loss", "passes"), [("flow_grpo", 4), ("awm", 3), ("nft", 3)])
def test_two_ranks_match_one_process(small_policy, loss, passes):
    cfg_s = SamplerConfig(num_steps=4, eta=0.7, batch_size=8)
    prompts = ["a cat"] * 4 + ["a dog"] * 4
    trajs = sample(small_policy, prompts, list(range(8)), cfg_s)
    adv = group_advantages(torch.linspace(0, 1, 8).view(2, 4))
    cfg = GRPOConfig(
        group_size=4,
        train_batch_size=4,
        timestep_fraction=1.0,
        learning_rate=1e-3,
        loss=loss,
        awm_draws=3,
        nft_draws=2,
    )

    full = copy.deepcopy(small_policy)
    opt = torch.optim.AdamW(full.trainable_parameters(), lr=cfg.learning_rate)
    grpo_update(full, opt, trajs, adv, cfg, seed=3)

    ranks = [copy.deepcopy(small_policy) for _ in range(2)]
    seen = [[], []]  # prompts each rank replays: its slices must partition the batch
    for r, p in enumerate(ranks):
        encode = p.encode_prompts
        p.encode_prompts = lambda prompts, _e=encode, _r=r: (
            seen[_r].append(len(prompts)) or _e(prompts)
        )

    def update(rank, p, sync):
        o = torch.optim.AdamW(p.trainable_parameters(), lr=cfg.learning_rate)
        grpo_update(p, o, trajs, adv, cfg, seed=3, shard=(rank, 2), grad_sync=sync)

    run_ranks(ranks, update)
    # half the samples x (4 steps, 3 noise draws, or 2 draws + 1 for v_old) each
    assert sum(seen[0]) == sum(seen[1]) == 8 * passes // 2
    ref = full.state_dict()
    for rank in ranks:
        for k, v in rank.state_dict().items():
            torch.testing.assert_close(v, ref[k], atol=2e-6, rtol=1e-5)
    # ... and the two ranks stay identical to each other.
    assert all(torch.equal(v, ranks[1].state_dict()[k]) for k, v in ranks[0].state_dict().items())
