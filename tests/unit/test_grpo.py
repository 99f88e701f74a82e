"""GRPO: advantages, the clipped loss, the KL term, and the update on the tiny policy."""

import copy

import pytest
import torch

from spotlight.config import GRPOConfig, SamplerConfig
from spotlight.flow.grpo import gaussian_mean_kl, group_advantages, grpo_loss
from spotlight.flow.sampler import sample
from spotlight.flow.update import grpo_update, train_step_indices


def test_group_advantages_normalize_each_group():
    r = torch.tensor([[0.1, 0.5, 0.9, 0.3], [2.0, 2.0, 2.0, 2.0]])
    adv = group_advantages(r, eps=0.0 + 1e-12)
    assert adv[0].mean().abs() < 1e-6
    assert adv[0].double().std(unbiased=False) == pytest.approx(1.0, abs=1e-5)
    assert torch.equal(adv[1], torch.zeros(4))  # zero variance: no signal, no NaN
    assert group_advantages(torch.tensor([[0.0, 100.0]]), clip=0.5).abs().max() == 0.5


def test_group_advantages_from_a_pool_measure_the_kept_group_against_every_candidate():
    # kept: one success and three failures of a pool of one success in eight candidates
    r = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.2, 0.4, 0.6, 0.8]])
    pool = [1.0] + [0.0] * 7
    adv = group_advantages(r, eps=1e-12, clip=100.0, pools=[pool, None])
    mean, std = 1 / 8, (7 / 64) ** 0.5
    expected = torch.tensor([(1 - mean) / std, -mean / std, -mean / std, -mean / std])
    assert torch.allclose(adv[0], expected.float(), atol=1e-5)
    assert torch.equal(adv[1], group_advantages(r[1:], eps=1e-12, clip=100.0)[0])  # its own
    assert torch.equal(group_advantages(r, pools=[None, None]), group_advantages(r))
    with pytest.raises(ValueError, match="pools"):
        group_advantages(r, pools=[pool])


@pytest.mark.parametrize(
    ("rewards", "match"),
    [
        (torch.ones(3, 1), "group size must be >= 2"),
        (torch.ones(4), "num_prompts, group_size"),
        (torch.tensor([[1.0, float("nan")]]), "NaN"),
    ],
)
def test_group_advantages_refuse_bad_input(rewards, match):
    with pytest.raises(ValueError, match=match):
        group_advantages(rewards)


def test_loss_on_policy_is_minus_mean_advantage():
    adv = torch.tensor([1.0, -2.0, 0.5])
    lp = torch.tensor([-1.0, -2.0, -3.0], requires_grad=True)
    loss, stats = grpo_loss(lp, lp.detach(), adv, clip_range=0.2)
    assert float(loss.detach()) == pytest.approx(float(-adv.mean()))
    assert stats.ratio_mean == pytest.approx(1.0) and stats.clip_frac == 0.0


def test_clip_stops_the_gradient_beyond_the_trust_region():
    """ratio = 1.5 > 1 + c: a positive advantage gets no more push, a negative one does."""
    old = torch.zeros(2)
    lp = torch.full((2,), float(torch.log(torch.tensor(1.5))), requires_grad=True)
    adv = torch.tensor([1.0, -1.0])
    loss, stats = grpo_loss(lp, old, adv, clip_range=0.2)
    loss.backward()
    assert lp.grad[0] == 0.0
    assert lp.grad[1] > 0.0  # gradient descent lowers the over-weighted bad sample's log-prob
    assert stats.clip_frac == 1.0


def test_kl_matches_closed_form_and_enters_the_loss():
    g = torch.Generator().manual_seed(0)
    m, r = torch.randn(3, 1, 4, 4, generator=g), torch.randn(3, 1, 4, 4, generator=g)
    std = torch.tensor([0.5, 1.0, 2.0])
    want = ((m.double() - r.double()) ** 2).flatten(1).mean(1) / (2 * std.double() ** 2)
    kl = gaussian_mean_kl(m, r, std)
    torch.testing.assert_close(kl.double(), want)
    lp = torch.zeros(3)
    loss, _ = grpo_loss(lp, lp, torch.zeros(3), 0.2, kl=kl, kl_beta=0.1)
    assert float(loss) == pytest.approx(0.1 * float(kl.mean()))


def test_train_step_indices_are_a_seeded_subset():
    a = train_step_indices(10, 0.5, seed=3)
    assert a == train_step_indices(10, 0.5, seed=3) and len(a) == 5 and a == sorted(set(a))
    assert train_step_indices(10, 0.01, seed=3).__len__() == 1
    with pytest.raises(ValueError):
        train_step_indices(10, 0.0, seed=3)


def _rollout(policy, group=4):
    cfg = SamplerConfig(num_steps=4, eta=0.7, batch_size=8)
    prompts = ["a cat"] * group + ["a dog"] * group
    return sample(policy, prompts, list(range(2 * group)), cfg)


def test_update_gives_finite_gradients_and_on_policy_ratios_of_one(small_policy):
    trajs = _rollout(small_policy)
    adv = group_advantages(torch.linspace(0, 1, 8).view(2, 4))
    before = copy.deepcopy(small_policy.state_dict())
    opt = torch.optim.AdamW(small_policy.trainable_parameters(), lr=1e-3)
    cfg = GRPOConfig(group_size=4, train_batch_size=8, timestep_fraction=1.0)
    stats = grpo_update(small_policy, opt, trajs, adv, cfg, seed=0)
    # One chunk: the replayed log-probs are the sampler's, so every ratio is 1.
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert stats["approx_kl"] < 1e-8
    grads = [p.grad for p in small_policy.trainable_parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert sum(float(g.abs().sum()) for g in grads) > 0
    changed = [k for k, v in small_policy.state_dict().items() if not torch.equal(v, before[k])]
    assert changed


def test_recorded_log_probs_equal_the_replayed_ones_for_multichannel_latents():
    """The sampler's per-step log-prob is a per-sample quantity whatever the channel count."""
    from spotlight.flow.sampler import step_log_prob
    from spotlight.flow.sde import step_params, time_grid
    from spotlight.policies.tiny import TinyConfig, TinyPolicy

    policy = TinyPolicy(
        TinyConfig(
            height=8,
            width=8,
            channels=3,
            num_layers=1,
            num_heads=2,
            head_dim=16,
            text_dim=16,
            max_text_len=16,
        ),
        seed=0,
    )
    cfg = SamplerConfig(num_steps=3, batch_size=2)
    trajs = sample(policy, ["a", "b"], [0, 1], cfg)
    grid = time_grid(3, cfg.shift)
    for j in range(3):
        p = step_params(grid, j, cfg.eta)
        with torch.no_grad():
            lp, _ = step_log_prob(
                policy,
                torch.stack([t.xs[j] for t in trajs]),
                torch.stack([t.xs[j + 1] for t in trajs]),
                [p, p],
                policy.encode_prompts(["a", "b"]),
                1.0,
            )
        torch.testing.assert_close(
            lp, torch.tensor([t.log_probs[j] for t in trajs]), rtol=1e-5, atol=1e-5
        )


def test_zero_advantages_give_zero_policy_gradient(small_policy):
    trajs = _rollout(small_policy)
    before = copy.deepcopy(small_policy.state_dict())
    opt = torch.optim.SGD(small_policy.trainable_parameters(), lr=1.0)
    cfg = GRPOConfig(group_size=4, train_batch_size=8, timestep_fraction=1.0)
    grpo_update(small_policy, opt, trajs, torch.zeros(2, 4), cfg, seed=0)
    grads = [p.grad for p in small_policy.trainable_parameters() if p.grad is not None]
    assert all(float(g.abs().max()) == 0.0 for g in grads)
    assert all(torch.equal(v, before[k]) for k, v in small_policy.state_dict().items())


def test_kl_to_a_frozen_copy_is_zero_before_any_step(small_policy):
    ref = copy.deepcopy(small_policy).requires_grad_(False)
    trajs = _rollout(small_policy)
    opt = torch.optim.SGD(small_policy.trainable_parameters(), lr=0.0)
    cfg = GRPOConfig(group_size=4, train_batch_size=8, kl_beta=0.5, timestep_fraction=1.0)
    stats = grpo_update(small_policy, opt, trajs, torch.zeros(2, 4), cfg, seed=0, ref_policy=ref)
    assert stats["kl"] == 0.0
    with pytest.raises(ValueError, match="reference policy"):
        grpo_update(small_policy, opt, trajs, torch.zeros(2, 4), cfg, seed=0)


def test_update_refuses_unfinished_or_mismatched_input(small_policy):
    trajs = _rollout(small_policy)
    opt = torch.optim.SGD(small_policy.trainable_parameters(), lr=0.0)
    cfg = GRPOConfig(group_size=4)
    with pytest.raises(ValueError, match="8 trajectories but 4 advantages"):
        grpo_update(small_policy, opt, trajs, torch.zeros(4), cfg, seed=0)
    trajs[3].step = 2
    with pytest.raises(ValueError, match="not finished"):
        grpo_update(small_policy, opt, trajs, torch.zeros(8), cfg, seed=0)
