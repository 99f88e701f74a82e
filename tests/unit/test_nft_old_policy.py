"""DiffusionNFT's EMA sampling policy (``grpo.nft_old_ema``): the schedule, the EMA, the swap,
``v_old`` in the update, the reference loop's sampling and its checkpoints."""

from __future__ import annotations

import copy
import dataclasses
import io
import json

import pytest
import torch

from spotlight.config import Config, GRPOConfig, PolicyConfig, SamplerConfig
from spotlight.flow import update
from spotlight.flow.grpo import group_advantages
from spotlight.flow.old_policy import (
    OldPolicy,
    ema_decay,
    load_old_policy,
    pack_parts,
    sampling_bytes,
    unpack_parts,
)
from spotlight.flow.sampler import Trajectory, sample
from spotlight.flow.update import grpo_update
from spotlight.policies.tiny import TinyLoRA, TinyPolicy
from spotlight.training.run_local import run_local

from .conftest import SMALL
from .test_update_data_parallel import run_ranks

NFT = GRPOConfig(group_size=4, loss="nft", nft_draws=2, train_batch_size=4, learning_rate=1e-3)
EMA = dataclasses.replace(
    NFT, nft_old_ema=True, nft_old_ema_hold_steps=0, nft_old_ema_rate=0.5, nft_old_ema_max=0.9
)


def _with_old_params(policy, old: OldPolicy) -> TinyPolicy:
    """A separate copy of ``policy`` whose trainable parameters are ``old``'s."""
    other = copy.deepcopy(policy)
    with torch.no_grad():
        for p, o in zip(other.trainable_parameters(), old.params, strict=True):
            p.copy_(o)
    return other


def _perturb(policy, scale=0.05, seed=0):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.trainable_parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen))


def _rollout(policy, cfg=None):
    cfg = cfg or SamplerConfig(num_steps=3, eta=0.7, batch_size=8)
    return sample(policy, ["a cat"] * 4 + ["a dog"] * 4, list(range(8)), cfg)


ADV = group_advantages(torch.tensor([[1.0, 0.0, 0.5, 0.2], [0.0, 0.3, 0.0, 1.0]])).flatten()


# -- The schedule and the config ---------------------------------------------------------------
def test_the_default_schedule_is_diffusion_nfts_decay_type_2():
    cfg = GRPOConfig(loss="nft", nft_old_ema=True)
    assert (cfg.nft_old_ema_hold_steps, cfg.nft_old_ema_rate, cfg.nft_old_ema_max) == (
        75,
        0.0075,
        0.999,
    )
    assert [ema_decay(s, cfg) for s in (0, 1, 74, 75)] == [0.0] * 4  # the hold (0 at 75 too)
    assert ema_decay(76, cfg) == pytest.approx(0.0075)  # the ramp
    assert ema_decay(100, cfg) == pytest.approx(25 * 0.0075)
    assert ema_decay(208, cfg) == pytest.approx(133 * 0.0075)  # 0.9975, below the cap
    assert ema_decay(209, cfg) == 0.999 and ema_decay(10_000, cfg) == 0.999  # the cap
    custom = dataclasses.replace(cfg, nft_old_ema_hold_steps=0, nft_old_ema_rate=0.001)
    custom = dataclasses.replace(custom, nft_old_ema_max=0.5)  # decay_type 1
    assert ema_decay(0, custom) == 0.0 and ema_decay(300, custom) == pytest.approx(0.3)
    assert ema_decay(600, custom) == 0.5
    with pytest.raises(ValueError, match="optimizer_steps"):
        ema_decay(-1, cfg)


def test_the_config_refuses_the_ema_without_nft_and_bad_schedules():
    GRPOConfig().validate()  # off by default
    EMA.validate()
    with pytest.raises(ValueError, match=r"nft_old_ema needs grpo\.loss 'nft'"):
        dataclasses.replace(EMA, loss="flow_grpo").validate()
    for field, value in (
        ("nft_old_ema_hold_steps", -1),
        ("nft_old_ema_rate", -0.1),
        ("nft_old_ema_max", 1.0),
        ("nft_old_ema_max", -0.1),
    ):
        with pytest.raises(ValueError, match=field):
            dataclasses.replace(EMA, **{field: value}).validate()
    round_trip = Config.from_dict(Config(grpo=EMA).to_dict())
    assert round_trip.grpo == EMA


# -- The old copy ---------------------------------------------------------------------------------
def test_the_ema_step_is_decay_old_plus_one_minus_decay_current(small_policy):
    old = OldPolicy(small_policy)
    assert old.matches(small_policy) and old.optimizer_steps == 0
    start = [o.clone() for o in old.params]
    _perturb(small_policy)
    assert not old.matches(small_policy)
    current = [p.detach().clone() for p in small_policy.trainable_parameters()]
    old.update(small_policy, 0.25)
    for o, s, c in zip(old.params, start, current, strict=True):
        assert torch.equal(o, s * 0.25 + c * 0.75)
    old.update(small_policy, 0.0)  # decay 0: exactly the current weights
    assert old.matches(small_policy)
    # step() counts optimizer steps and takes the schedule's decay at the new total
    cfg = dataclasses.replace(EMA, nft_old_ema_hold_steps=2, nft_old_ema_rate=0.25)
    _perturb(small_policy, seed=1)
    assert old.step(small_policy, 2, cfg) == 0.0 and old.matches(small_policy)
    before = [o.clone() for o in old.params]
    _perturb(small_policy, seed=2)
    assert old.step(small_policy, 3, cfg) == 0.75 and old.optimizer_steps == 5
    for o, b, p in zip(old.params, before, small_policy.trainable_parameters(), strict=True):
        assert torch.equal(o, b * 0.75 + p.detach() * 0.25)
    with pytest.raises(ValueError, match="decay"):
        old.update(small_policy, 1.5)


def test_the_swap_holds_the_old_weights_and_restores_the_current_ones_exactly(small_policy):
    old = OldPolicy(small_policy)
    _perturb(small_policy)
    current = copy.deepcopy(small_policy.state_dict())
    reference = _with_old_params(small_policy, old)
    x = torch.randn(2, *small_policy.latent_shape, generator=torch.Generator().manual_seed(0))
    t = torch.tensor([0.3, 0.8])
    with old.applied(small_policy):
        assert not torch.is_grad_enabled()
        assert old.matches(small_policy)
        inside = small_policy.velocity(x, t, small_policy.encode_prompts(["a", "b"]))
    want = reference.velocity(x, t, reference.encode_prompts(["a", "b"]))
    assert torch.equal(inside, want)
    assert torch.is_grad_enabled()
    assert all(torch.equal(v, current[k]) for k, v in small_policy.state_dict().items())
    with pytest.raises(RuntimeError, match="boom"), old.applied(small_policy):
        raise RuntimeError("boom")
    assert all(torch.equal(v, current[k]) for k, v in small_policy.state_dict().items())
    # the published (sampling) bytes are the old policy's, the policy keeps its own
    from safetensors.torch import load

    published = load(sampling_bytes(small_policy, old))
    assert all(torch.equal(v, reference.state_dict()[k]) for k, v in published.items())
    assert load(sampling_bytes(small_policy, None)).keys() == published.keys()
    assert all(torch.equal(v, current[k]) for k, v in small_policy.state_dict().items())


def test_lora_keeps_only_the_adapters_and_swaps_them():
    policy = TinyPolicy(SMALL, seed=3, lora=TinyLoRA(rank=2))
    old = OldPolicy(policy)
    assert len(old.params) == len(policy.trainable_parameters())
    n_old = sum(o.numel() for o in old.params)
    assert n_old < sum(p.numel() for p in policy.parameters()) / 4  # not a second model
    _perturb(policy)
    before = copy.deepcopy(policy.state_dict())
    with old.applied(policy):
        assert old.matches(policy)
    assert all(torch.equal(v, before[k]) for k, v in policy.state_dict().items())
    with pytest.raises(ValueError, match="does not fit"):
        old.matches(TinyPolicy(SMALL, seed=3))  # a full model: other parameters


def test_the_old_policy_round_trips_through_bytes(small_policy):
    old = OldPolicy(small_policy)
    _perturb(small_policy)
    old.step(small_policy, 3, EMA)
    fresh = OldPolicy(TinyPolicy(SMALL, seed=7))
    fresh.load_bytes(old.to_bytes())
    assert fresh.optimizer_steps == 3
    assert all(torch.equal(a, b) for a, b in zip(fresh.params, old.params, strict=True))
    assert fresh.to_bytes() == old.to_bytes()
    lora = OldPolicy(TinyPolicy(SMALL, seed=7, lora=TinyLoRA(rank=2)))
    with pytest.raises(ValueError, match="does not fit"):
        lora.load_bytes(old.to_bytes())
    with pytest.raises(ValueError, match="not an old-policy file"):
        fresh.load_bytes(sampling_bytes(small_policy, None))
    with pytest.raises(ValueError, match="unreadable"):
        fresh.load_bytes(b"garbage")
    load_old_policy(None, None, "x")  # no EMA, nothing checkpointed
    with pytest.raises(ValueError, match="holds no old policy"):
        load_old_policy(fresh, None, "x")
    with pytest.raises(ValueError, match="holds an old policy"):
        load_old_policy(None, old.to_bytes(), "x")


def test_parts_pack_and_plain_optimizer_bytes_are_told_apart(small_policy):
    parts = {"optimizer": b"\x00opt", "policy": b"", "old_policy": b"old" * 7}
    assert unpack_parts(pack_parts(parts)) == parts
    buf = io.BytesIO()
    opt = torch.optim.AdamW(small_policy.trainable_parameters())
    torch.save(opt.state_dict(), buf)
    assert unpack_parts(buf.getvalue()) is None
    with pytest.raises(ValueError, match="header accounts"):
        unpack_parts(pack_parts(parts) + b"x")


# -- v_old in the update -------------------------------------------------------------------------
def _update(policy, cfg, old=None, adv=ADV, opt_cls=torch.optim.AdamW, lr=1e-3, **kw):
    trajs = _rollout(policy)
    opt = opt_cls(policy.trainable_parameters(), lr=lr)
    return grpo_update(policy, opt, trajs, adv, cfg, seed=0, old_policy=old, **kw)


def test_an_old_policy_equal_to_the_weights_changes_nothing_bit_for_bit(small_policy, monkeypatch):
    """Decay 0 so far: old == current, the update is today's. Also through the swap path (the
    first chunk's v_old from a separate no-grad forward instead of its own): same bits."""
    cfg = dataclasses.replace(NFT, num_inner_epochs=2)
    plain = copy.deepcopy(small_policy)
    stats_plain = _update(plain, cfg)
    with_old = copy.deepcopy(small_policy)
    stats_old = _update(with_old, cfg, OldPolicy(with_old))
    assert stats_old == stats_plain
    assert all(torch.equal(v, plain.state_dict()[k]) for k, v in with_old.state_dict().items())
    forced = copy.deepcopy(small_policy)
    old = OldPolicy(forced)
    monkeypatch.setattr(old, "matches", lambda _policy: False)
    _update(forced, cfg, old)
    assert all(torch.equal(v, plain.state_dict()[k]) for k, v in forced.state_dict().items())


def test_zero_advantages_and_v_equal_to_v_old_give_no_gradient_through_the_old_path(
    small_policy, monkeypatch
):
    """r = 1/2 and v_theta = v_old (the old copy equals the weights, its v_old computed by the
    swap path): exactly no gradient; with an old copy that differs, r = 1/2 pulls the velocity
    toward v_old, so the weights move (with v_old = the current weights' they could not)."""
    old = OldPolicy(small_policy)
    monkeypatch.setattr(old, "matches", lambda _policy: False)
    before = copy.deepcopy(small_policy.state_dict())
    stats = _update(small_policy, NFT, old, torch.zeros(8), torch.optim.SGD, 1.0)
    assert stats["grad_norm"] == 0.0
    assert all(torch.equal(v, before[k]) for k, v in small_policy.state_dict().items())
    differing = OldPolicy(small_policy)
    _perturb(small_policy)
    moved = copy.deepcopy(small_policy.state_dict())
    stats = _update(small_policy, NFT, differing, torch.zeros(8), torch.optim.SGD, 0.1)
    assert stats["grad_norm"] > 0
    assert any(not torch.equal(v, moved[k]) for k, v in small_policy.state_dict().items())


def test_v_old_is_the_old_policys_velocity_in_every_chunk_and_epoch(small_policy, monkeypatch):
    old = OldPolicy(small_policy)
    _perturb(small_policy)  # the trained weights moved away from the sampling policy
    reference = _with_old_params(small_policy, old)
    seen = []
    real = update.diffusion_nft_loss

    def spy(velocity, old_velocity, x_t, x0, t, *args):
        seen.append((old_velocity.clone(), x_t, t, x0))
        return real(velocity, old_velocity, x_t, x0, t, *args)

    monkeypatch.setattr(update, "diffusion_nft_loss", spy)
    trajs = _rollout(small_policy)
    by_x0 = {tuple(tr.latents.flatten()[:4].tolist()): tr.prompt for tr in trajs}
    cfg = dataclasses.replace(NFT, num_inner_epochs=2)
    start = copy.deepcopy(small_policy)
    with_old = grpo_update(
        small_policy,
        torch.optim.AdamW(small_policy.trainable_parameters(), lr=1e-3),
        trajs,
        ADV,
        cfg,
        seed=0,
        old_policy=old,
    )
    assert len(seen) == 2 * 2 * 2  # chunks x epochs x draws: the first chunk too
    for v_old, x_t, t, x0 in seen:
        prompts = [by_x0[tuple(x.flatten()[:4].tolist())] for x in x0]
        with torch.no_grad():
            want = reference.velocity(x_t, t, reference.encode_prompts(prompts))
        assert torch.equal(v_old, want)
    # ... a different update than against the starting weights
    monkeypatch.setattr(update, "diffusion_nft_loss", real)
    without = grpo_update(
        start, torch.optim.AdamW(start.trainable_parameters(), lr=1e-3), trajs, ADV, cfg, seed=0
    )
    assert with_old["policy_loss"] != without["policy_loss"]
    assert any(
        not torch.equal(v, start.state_dict()[k]) for k, v in small_policy.state_dict().items()
    )
    with pytest.raises(ValueError, match="old policy is DiffusionNFT's"):
        _update(small_policy, dataclasses.replace(NFT, loss="awm"), old)


def test_two_ranks_with_an_old_policy_match_one_process(small_policy):
    old_start = OldPolicy(small_policy)
    _perturb(small_policy)
    trajs = _rollout(small_policy)
    full = copy.deepcopy(small_policy)
    opt = torch.optim.AdamW(full.trainable_parameters(), lr=NFT.learning_rate)
    grpo_update(full, opt, trajs, ADV, NFT, seed=3, old_policy=copy.deepcopy(old_start))
    ranks = [copy.deepcopy(small_policy) for _ in range(2)]

    def update(rank, p, sync):
        o = torch.optim.AdamW(p.trainable_parameters(), lr=NFT.learning_rate)
        grpo_update(
            p,
            o,
            trajs,
            ADV,
            NFT,
            seed=3,
            shard=(rank, 2),
            grad_sync=sync,
            old_policy=copy.deepcopy(old_start),
        )

    run_ranks(ranks, update)
    for rank in ranks:
        for k, v in rank.state_dict().items():
            torch.testing.assert_close(v, full.state_dict()[k], atol=1e-5, rtol=1e-4)
    assert all(torch.equal(v, ranks[1].state_dict()[k]) for k, v in ranks[0].state_dict().items())


# -- The reference loop and its run folder -------------------------------------------------------
LOOP = Config(
    recipe="tiny-smoke",
    policy=PolicyConfig(name="tiny", init_seed=0, options=dataclasses.asdict(SMALL)),
    sampler=SamplerConfig(num_steps=4, eta=0.7, batch_size=8),
    grpo=dataclasses.replace(EMA, learning_rate=2e-3, num_inner_epochs=2),
    reward="brightness",
    num_iterations=4,
    num_prompts_per_iteration=2,
    num_val_prompts=2,
    num_val_seeds=1,
    val_every=2,
)


def _same_tensors(a, b) -> bool:
    from safetensors.torch import load_file

    ta, tb = load_file(str(a)), load_file(str(b))
    return ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)


def _rows(path):
    return [json.loads(x) for x in (path / "metrics.jsonl").read_text().splitlines()]


def test_decay_zero_throughout_is_the_run_without_the_ema_bit_for_bit(tmp_path):
    off = dataclasses.replace(LOOP, grpo=dataclasses.replace(LOOP.grpo, nft_old_ema=False))
    held = dataclasses.replace(LOOP, grpo=dataclasses.replace(LOOP.grpo, nft_old_ema_hold_steps=99))
    run_local(off, tmp_path / "off")
    run_local(held, tmp_path / "held")
    rows_off, rows_held = _rows(tmp_path / "off"), _rows(tmp_path / "held")
    for a, b in zip(rows_off, rows_held, strict=True):
        assert b.pop("loss/nft_old_decay") == 0.0
        a.pop("wall_s"), b.pop("wall_s")
        assert {k: v for k, v in a.items() if not k.endswith("_s")} == {
            k: v for k, v in b.items() if not k.endswith("_s")
        }
    ckpt_off, ckpt_held = tmp_path / "off/checkpoint", tmp_path / "held/checkpoint"
    assert _same_tensors(ckpt_off / "policy.safetensors", ckpt_held / "policy.safetensors")
    assert not (ckpt_off / "nft_old_policy.safetensors").exists()
    old = OldPolicy(TinyPolicy(SMALL))
    old.load_bytes((ckpt_held / "nft_old_policy.safetensors").read_bytes())
    assert old.optimizer_steps == 4 * 2 * 2  # iterations x epochs x chunks


def test_the_loop_samples_and_validates_with_the_old_policy(monkeypatch):
    from spotlight.policies import make_policy
    from spotlight.rewards import build_reward
    from spotlight.training.evaluate import score_prompts, summarize
    from spotlight.training.loop import ReferenceLoop, iteration_batch

    loop = ReferenceLoop(LOOP, make_policy(LOOP.policy), build_reward(LOOP.reward))
    row = loop.run_iteration(0)
    assert row["loss/nft_old_decay"] == 0.9  # 4 optimizer steps x 0.5, capped
    assert not loop.old_policy.matches(loop.policy)
    sampler_view = _with_old_params(loop.policy, loop.old_policy)
    scores = score_prompts(sampler_view, loop.reward, loop.val_prompts, 1, LOOP.sampler, 1)
    assert loop.evaluate() == summarize(scores)["mean_reward"]
    prompts, seeds, init = iteration_batch(LOOP, loop.train_prompts, 1, with_init_seeds=True)
    want = sample(sampler_view, prompts, seeds, LOOP.sampler, 1, init)
    seen = []
    import spotlight.training.loop as loop_module

    def spy(policy, optimizer, trajectories, *args, **kwargs):
        seen.extend(trajectories)
        return grpo_update(policy, optimizer, trajectories, *args, **kwargs)

    monkeypatch.setattr(loop_module, "grpo_update", spy)
    loop.run_iteration(1)
    assert [tr.latents.tolist() for tr in seen] == [tr.latents.tolist() for tr in want]


def test_a_resumed_run_with_the_ema_is_the_uninterrupted_one(tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    run_local(LOOP, straight)
    run_local(dataclasses.replace(LOOP, num_iterations=2), split)
    run_local(LOOP, split, resume=True)
    rows_a, rows_b = _rows(straight), _rows(split)
    assert len(rows_b) == 4
    for a, b in zip(rows_a, rows_b, strict=True):
        for k in ("train_reward_mean", "loss/policy_loss", "loss/nft_old_decay", "val_reward"):
            assert a.get(k) == b.get(k), k
    for name in ("policy.safetensors", "nft_old_policy.safetensors"):
        assert _same_tensors(straight / "checkpoint" / name, split / "checkpoint" / name), name
    old = OldPolicy(TinyPolicy(SMALL))
    old.load_bytes((split / "checkpoint/nft_old_policy.safetensors").read_bytes())
    assert old.optimizer_steps == 4 * 2 * 2
    assert not old.matches(TinyPolicy.load(split / "checkpoint/policy.safetensors"))
    state = json.loads((split / "checkpoint/state.json").read_text())
    assert "old_policy_sha256" in state
    # a resume that cannot restore the old policy is refused
    off = dataclasses.replace(LOOP, grpo=dataclasses.replace(LOOP.grpo, nft_old_ema=False))
    with pytest.raises(ValueError, match="holds an old policy"):
        run_local(dataclasses.replace(off, num_iterations=5), split, resume=True)
    (split / "checkpoint/nft_old_policy.safetensors").write_bytes(b"torn")
    with pytest.raises(ValueError, match="does not match its checksum"):
        run_local(dataclasses.replace(LOOP, num_iterations=5), split, resume=True)


# -- The trainer's GPUs sample with the old policy (trainer_samples) -------------------------------
def test_the_trainer_samples_rollout_items_with_the_old_policy(small_policy):
    from spotlight.job.trainer_sampling import TrainerSampler
    from spotlight.scheduling.work_queue import Kind, WorkItem

    class _Reward:
        def remote(self, images, prompts):
            return self

        def result(self):
            return [0.0] * 4

    old = OldPolicy(small_policy)
    _perturb(small_policy)
    current = copy.deepcopy(small_policy.state_dict())
    cfg = SamplerConfig(num_steps=3, eta=0.7, batch_size=4)
    sampler = TrainerSampler(small_policy, cfg, "trainer-0", 1, 1, 0, _Reward(), old_policy=old)
    item = WorkItem("r0-v1-0", Kind.ROLLOUT, 0, 1, ("a cat",) * 4, (1, 2, 3, 4))
    result = sampler.sample(None, item)
    want = sample(_with_old_params(small_policy, old), ["a cat"] * 4, [1, 2, 3, 4], cfg, 1)
    got = [Trajectory.from_bytes(b).latents for b in result.trajectories]
    assert all(torch.equal(a, b.latents) for a, b in zip(got, want, strict=True))
    assert all(torch.equal(v, current[k]) for k, v in small_policy.state_dict().items())
