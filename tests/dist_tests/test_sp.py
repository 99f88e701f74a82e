"""Ulysses SP on CPU processes (gloo): the same velocity and trajectories as one process, and
items interrupted by a regroup finish on the new group with the same result."""

from __future__ import annotations

import dataclasses
import socket

import pytest
import torch
import torch.multiprocessing as mp

from spotlight.recipes import get_recipe

PROMPTS = ['a sign that says "CAT"', 'a sign that says "DOG"']
SEEDS = [5, 6]


def _velocity_in_group(rank, world, port, q):
    import torch.distributed as dist

    from spotlight.policies import make_policy
    from spotlight.policies.sp import enable_ulysses

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        pol = make_policy(get_recipe("tiny-ocr").policy, "cpu")
        enable_ulysses(pol.transformer, world)
        x = torch.randn((2, *pol.latent_shape), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            v = pol.velocity(x, torch.tensor([0.7, 0.3]), pol.encode_prompts(PROMPTS))
        q.put((rank, v.numpy()))  # by value: the process exits right after
    finally:
        dist.destroy_process_group()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("world", [2, 4])
def test_sp_velocity_equals_one_process(world):
    from spotlight.policies import make_policy

    torch.set_num_threads(1)
    pol = make_policy(get_recipe("tiny-ocr").policy, "cpu")
    x = torch.randn((2, *pol.latent_shape), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = pol.velocity(x, torch.tensor([0.7, 0.3]), pol.encode_prompts(PROMPTS))
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _port()
    procs = [ctx.Process(target=_velocity_in_group, args=(r, world, port, q)) for r in range(world)]
    for p in procs:
        p.start()
    got = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    for _, arr in got:  # every rank has the whole output
        v = torch.from_numpy(arr)
        assert torch.allclose(v, ref, atol=1e-5, rtol=0), (v - ref).abs().max()


def test_invalid_degrees_are_refused_with_the_valid_ones():
    from spotlight.policies import make_policy
    from spotlight.policies.sp import enable_ulysses

    pol = make_policy(get_recipe("tiny-ocr").policy, "cpu")
    with pytest.raises(RuntimeError, match="initialise torch"):
        enable_ulysses(pol.transformer, 3)
    from spotlight.sp.sp_groups import check_degree

    with pytest.raises(ValueError, match="valid degrees: 1, 2, 4"):
        check_degree(3, pol.transformer.config.num_attention_heads)


def test_items_in_flight_survive_a_regroup_and_match_one_process():
    from spotlight.flow.sampler import Trajectory, sample
    from spotlight.policies import make_policy
    from spotlight.sp.elastic import NodeWorkers
    from spotlight.sp.sp_groups import assign, valid_degrees

    cfg = get_recipe("tiny-ocr")
    smp = dataclasses.asdict(cfg.sampler)
    nw = NodeWorkers(4)
    try:
        nw.load([0, 1, 2, 3], cfg.policy.checkpoint, dataclasses.asdict(cfg.policy))
        nw.form([[0, 1, 2, 3]])
        half = nw.sample([0, 1, 2, 3], PROMPTS, SEEDS, smp, 0, None, 4)  # 4 of 10 steps on SP 4
        assert [Trajectory.from_bytes(b).step for b in half] == [4, 4]
        nw.lose(3)  # a member is preempted: the survivors re-form as 2 + 1
        nw.form(assign([0, 1, 2], 2, valid_degrees(4)))
        assert nw.groups == [[0, 1], [2]]
        with pytest.raises(ValueError, match="valid degrees: 1, 2, 4"):
            nw.form([[0, 1, 2]])  # refused before anything changes
        assert nw.groups == [[0, 1], [2]]
        on_two = nw.sample([0, 1], PROMPTS, SEEDS, smp, 0, half, None)  # resumed on SP 2
        on_one = nw.sample([2], PROMPTS, SEEDS, smp, 0, half, None)  # and, apart, on 1 worker
        # both groups at once, each with one of the item's samples (data parallel over groups)
        parts = [(PROMPTS[:1], SEEDS[:1], half[:1]), (PROMPTS[1:], SEEDS[1:], half[1:])]
        shared = [b for part in nw.sample_groups([[0, 1], [2]], parts, smp, 0, None) for b in part]
        # a replacement joins with weights from a peer; the group is whole again
        before = dict(zip(nw.workers, nw.pids(), strict=True))
        joined = nw.join([3], peer=0)
        assert joined["copy_s"] > 0 and nw.checksum(3) == nw.checksum(0)
        nw.form([[0, 1, 2, 3]])
        after = dict(zip(nw.workers, nw.pids(), strict=True))
        assert {w: after[w] for w in before} == before and after[3] not in before.values()
        regrown = nw.sample([0, 1, 2, 3], PROMPTS, SEEDS, smp, 0, half, None)
    finally:
        nw.shutdown()
    torch.set_num_threads(1)
    ref = sample(make_policy(cfg.policy, "cpu"), PROMPTS, SEEDS, cfg.sampler, 0)
    for states in (on_two, on_one, shared, regrown):
        got = [Trajectory.from_bytes(b) for b in states]
        for a, b in zip(got, ref, strict=True):
            assert a.step == b.step == cfg.sampler.num_steps
            # SP changes the order of float sums: equal within float tolerance, not bit for bit
            assert torch.allclose(a.latents, b.latents, atol=1e-3, rtol=0)
            assert a.log_probs == pytest.approx(b.log_probs, abs=1e-3)
