"""Flow-GRPO-Fast sampling: an SDE window among ODE steps, shared initial noise per group."""

import dataclasses
import json
import math

import pytest
import torch

from spotlight.config import Config, GRPOConfig
from spotlight.flow.sampler import Trajectory, advance, guided_velocity, sample, start_trajectory
from spotlight.flow.sde import ode_step, time_grid
from spotlight.flow.update import grpo_update, train_step_indices
from spotlight.overrides import apply_overrides
from spotlight.training.loop import iteration_batch, prompt_sets

from .test_sampler import CFG, same

FAST = Config(grpo=GRPOConfig(group_size=4), num_prompts_per_iteration=2, num_train_prompts=16)
# 6 steps; steps 2 and 3 are stochastic (at a higher noise level), 0, 1, 4, 5 are ODE steps.
WIN = dataclasses.replace(CFG, sde_window_start=2, sde_window_end=4, window_eta=1.0)


def test_a_window_over_every_step_is_todays_sampler(small_policy):
    full = dataclasses.replace(CFG, sde_window_start=0, sde_window_end=CFG.num_steps)
    assert full.sde_window == CFG.sde_window == (0, 6) and CFG.sde_eta == CFG.eta
    a = sample(small_policy, ["a cat", "a dog"], [3, 4], CFG)
    b = sample(small_policy, ["a cat", "a dog"], [3, 4], full)
    assert all(same(x, y) for x, y in zip(a, b, strict=True))
    for n, f, s in [(6, 0.5, 0), (10, 0.3, 7), (4, 1.0, 2)]:
        assert train_step_indices(n, f, s, window=(0, n)) == train_step_indices(n, f, s)


def test_steps_outside_the_window_are_ode_steps(small_policy):
    """Shared initial noise, two seeds: identical up to the window, different from it on."""
    a, b = sample(small_policy, ["a cat"] * 2, [1, 2], WIN, init_seeds=[5, 5])
    for k in range(3):  # x before the window starts: xs[0] (shared), xs[1], xs[2] (ODE)
        assert torch.equal(a.xs[k], b.xs[k])
    for k in range(3, 7):
        assert not torch.equal(a.xs[k], b.xs[k])
    # An ODE step is x + v dt with no noise: recompute steps 0 and 4 from the velocity (a
    # forward of another batch size: equal up to float rounding; the noise would be ~0.1).
    grid = time_grid(6, CFG.shift)
    cond = small_policy.encode_prompts(["a cat"])
    for k in (0, 4):
        with torch.no_grad():
            t = torch.tensor([grid[k]])
            v = guided_velocity(small_policy, a.xs[k][None], t, cond, 1.0).float()
        want = ode_step(a.xs[k][None], v, grid[k], grid[k + 1])[0]
        torch.testing.assert_close(want, a.xs[k + 1], rtol=0, atol=1e-5)


def test_log_probs_exist_only_in_the_window(small_policy):
    (tr,) = sample(small_policy, ["a cat"], [1], WIN)
    assert len(tr.log_probs) == 6
    assert [tr.log_probs[k] for k in (0, 1, 4, 5)] == [0.0] * 4
    assert all(math.isfinite(tr.log_probs[k]) and tr.log_probs[k] != 0.0 for k in (2, 3))


def test_every_step_draws_its_noise_whatever_the_window(small_policy):
    """ODE steps consume the generator too: its state after step k does not depend on the
    window, and neither does the initial noise."""
    a = start_trajectory("a", 9, small_policy.latent_shape, CFG)
    b = start_trajectory("a", 9, small_policy.latent_shape, WIN)
    for k in range(1, 7):
        advance(small_policy, [a, b], num_steps=1)
        assert torch.equal(a.generator_state, b.generator_state), k
    assert torch.equal(a.xs[0], b.xs[0])


def test_window_eta_sets_the_noise_of_the_window_only(small_policy):
    lo = dataclasses.replace(WIN, window_eta=None)
    a = sample(small_policy, ["a cat"], [1], WIN)[0]
    b = sample(small_policy, ["a cat"], [1], lo)[0]
    assert all(torch.equal(a.xs[k], b.xs[k]) for k in range(3))
    assert not torch.equal(a.xs[3], b.xs[3])
    assert (WIN.sde_eta, lo.sde_eta) == (1.0, CFG.eta)


def test_group_init_noise_shares_xs0_within_a_group_only(small_policy):
    cfg = dataclasses.replace(FAST, sampler=dataclasses.replace(WIN, group_init_noise=True))
    train, _ = prompt_sets(cfg)
    prompts, seeds, inits = iteration_batch(cfg, train, 2, with_init_seeds=True)
    assert (prompts, seeds) == iteration_batch(cfg, train, 2) == iteration_batch(FAST, train, 2)
    assert iteration_batch(FAST, train, 2, with_init_seeds=True)[2] is None
    g = cfg.grpo.group_size
    assert len(inits) == len(seeds) == 8 and len(set(seeds)) == 8
    assert all(len(set(inits[b * g : (b + 1) * g])) == 1 for b in range(2)) and inits[0] != inits[g]
    trs = sample(small_policy, prompts, seeds, cfg.sampler, init_seeds=inits)
    assert [tr.init_seed for tr in trs] == inits
    for b in range(2):
        group = trs[b * g : (b + 1) * g]
        assert all(torch.equal(tr.xs[0], group[0].xs[0]) for tr in group)
        assert all(not torch.equal(tr.latents, group[0].latents) for tr in group[1:])
    assert not torch.equal(trs[0].xs[0], trs[g].xs[0])


def test_init_seed_replaces_only_the_initial_noise(small_policy):
    shape = small_policy.latent_shape
    plain = start_trajectory("a", 5, shape, CFG)
    assert same(plain, start_trajectory("a", 5, shape, CFG, init_seed=5))  # = no init seed
    shared = start_trajectory("a", 5, shape, CFG, init_seed=77)
    assert torch.equal(shared.xs[0], start_trajectory("b", 6, shape, CFG, init_seed=77).xs[0])
    assert not torch.equal(shared.xs[0], plain.xs[0])
    # the seed's generator drew (and dropped) its own initial noise: same step noise after it
    assert torch.equal(shared.generator_state, plain.generator_state)


@pytest.mark.parametrize("stop", [1, 3, 5])  # before, inside and after the window
def test_round_trip_and_resume_mid_trajectory(small_policy, stop):
    cfg = dataclasses.replace(WIN, group_init_noise=True)
    full = sample(small_policy, ["a sign", "a cat"], [21, 22], cfg, init_seeds=[8, 8])
    part = [
        start_trajectory(p, s, small_policy.latent_shape, cfg, 2, init_seed=8)
        for p, s in (("a sign", 21), ("a cat", 22))
    ]
    advance(small_policy, part, num_steps=stop)
    back = [Trajectory.from_bytes(tr.to_bytes()) for tr in part]
    for tr, bk in zip(part, back, strict=True):
        assert (bk.seed, bk.init_seed, bk.step, bk.weights_version, bk.sampler) == (
            tr.seed,
            8,
            stop,
            2,
            cfg,
        )
        assert same(tr, bk) and torch.equal(tr.generator_state, bk.generator_state)
    advance(small_policy, back[1:])  # resumed one at a time, in another batch
    advance(small_policy, back[:1])
    assert same(back[0], full[0]) and same(back[1], full[1])
    plain = start_trajectory("a", 1, small_policy.latent_shape, CFG)
    assert Trajectory.from_bytes(plain.to_bytes()).init_seed is None


def test_the_new_fields_survive_json_and_set():
    cfg = apply_overrides(
        Config(),
        [
            "sampler.sde_window_start=2",
            "sampler.sde_window_end=4",
            "sampler.window_eta=1.0",
            "sampler.group_init_noise=true",
        ],
    )
    assert cfg.sampler.sde_window == (2, 4) and cfg.sampler.group_init_noise
    assert Config.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    back = apply_overrides(cfg, ["sampler.sde_window_end=none", "sampler.window_eta=none"])
    assert back.sampler.sde_window == (2, cfg.sampler.num_steps) and back.sampler.sde_eta == 0.7


@pytest.mark.parametrize(
    ("window", "match"),
    [
        ((3, 3), r"sde_window \[3, 3\)"),
        ((4, 2), r"sde_window \[4, 2\)"),
        ((0, 7), r"sde_window \[0, 7\).*num_steps \(6\)"),
        ((-1, 2), r"sde_window \[-1, 2\)"),
        ((6, None), r"sde_window \[6, 6\)"),
    ],
)
def test_a_bad_window_is_named(small_policy, window, match):
    bad = dataclasses.replace(CFG, sde_window_start=window[0], sde_window_end=window[1])
    with pytest.raises(ValueError, match=match):
        bad.validate()
    with pytest.raises(ValueError, match=match):
        start_trajectory("a", 1, small_policy.latent_shape, bad)


def test_other_bad_inputs_are_named(small_policy):
    with pytest.raises(ValueError, match="window_eta must be > 0"):
        dataclasses.replace(CFG, window_eta=0.0).validate()
    with pytest.raises(ValueError, match="init_seed"):
        start_trajectory("a", 1, small_policy.latent_shape, CFG, init_seed=-3)
    with pytest.raises(ValueError, match="2 seeds but 1 init seeds"):
        sample(small_policy, ["a", "b"], [1, 2], CFG, init_seeds=[4])
    with pytest.raises(ValueError, match=r"step window \[2, 9\)"):
        train_step_indices(6, 0.5, 0, window=(2, 9))


def test_flow_grpo_trains_only_window_steps(small_policy, monkeypatch):
    for seed in range(20):
        steps = train_step_indices(10, 0.5, seed, window=(3, 7))
        assert len(steps) == 2 and all(3 <= j < 7 for j in steps)  # the fraction of 4 steps
    import spotlight.flow.update as update

    trained = []
    real = update._step_loss

    def spy(policy, ref, chunk, adv, j, p, cfg):
        trained.append(j)
        return real(policy, ref, chunk, adv, j, p, cfg)

    monkeypatch.setattr(update, "_step_loss", spy)
    trajs = sample(small_policy, ["a cat"] * 2 + ["a dog"] * 2, [0, 1, 2, 3], WIN)
    opt = torch.optim.AdamW(small_policy.trainable_parameters(), lr=1e-3)
    cfg = GRPOConfig(group_size=2, train_batch_size=4, timestep_fraction=1.0)
    stats = grpo_update(small_policy, opt, trajs, torch.tensor([1.0, -1, 1, -1]), cfg, seed=0)
    assert sorted(trained) == [2, 3]
    # replayed at window_eta (1.0, not eta 0.7): on-policy ratios are 1
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    trained.clear()
    half = GRPOConfig(group_size=2, train_batch_size=4, timestep_fraction=0.5)
    grpo_update(small_policy, opt, trajs, torch.zeros(4), half, seed=5)
    assert len(trained) == 1 and trained[0] in (2, 3)
    trajs[1].sampler = CFG
    with pytest.raises(ValueError, match=r"trajectories \[1\] were sampled with other steps"):
        grpo_update(small_policy, opt, trajs, torch.zeros(4), cfg, seed=0)
