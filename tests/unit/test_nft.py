"""DiffusionNFT (grpo.loss = 'nft'): the loss, the optimality mapping, v_old, the update."""

import copy
import dataclasses

import pytest
import torch

import spotlight.flow.update as update
from spotlight.config import GRPOConfig, SamplerConfig
from spotlight.flow.grpo import diffusion_nft_loss, group_advantages, nft_optimality
from spotlight.flow.sampler import sample
from spotlight.flow.update import awm_noise, grpo_update

NFT = GRPOConfig(group_size=4, train_batch_size=8, loss="nft", nft_draws=2)


def _batch(seed=0, n=3, shape=(1, 4, 4)):
    """``(x0, eps, t, x_t, v_old)`` of random plain tensors."""
    g = torch.Generator().manual_seed(seed)
    x0, eps = torch.randn(n, *shape, generator=g), torch.randn(n, *shape, generator=g)
    t = torch.rand(n, generator=g) * 0.9 + 0.05
    tb = t.view(-1, 1, 1, 1)
    return x0, eps, t, (1 - tb) * x0 + tb * eps, torch.randn(n, *shape, generator=g)


def _grad_at_old(r, seed=0, beta=0.1):
    x0, eps, t, x_t, v_old = _batch(seed)
    v = v_old.clone().requires_grad_(True)
    loss, _ = diffusion_nft_loss(v, v_old, x_t, x0, t, r, beta)
    loss.backward()
    return v.grad, eps - x0 - v_old


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_preference_gives_exactly_no_gradient_at_the_old_policy(seed):
    grad, _ = _grad_at_old(torch.full((3,), 0.5), seed)
    assert torch.equal(grad, torch.zeros_like(grad))


@pytest.mark.parametrize("beta", [0.1, 1.0])
def test_positives_pull_toward_the_target_and_negatives_push_away(beta):
    """r = 1: the gradient at v_theta = v_old is along -(target - v_old) per sample (descent
    moves toward the flow-matching target eps - x0), and a small step lowers the loss;
    r = 0: the opposite."""
    for r_value, sign in ((1.0, 1.0), (0.0, -1.0)):
        r = torch.full((3,), r_value)
        grad, direction = _grad_at_old(r, beta=beta)
        for g, d in zip(grad.flatten(1), direction.flatten(1), strict=True):
            cos = torch.nn.functional.cosine_similarity(g, -sign * d, dim=0)
            assert float(cos) == pytest.approx(1.0, abs=1e-5)
        x0, eps, t, x_t, v_old = _batch()
        at_old, _ = diffusion_nft_loss(v_old, v_old, x_t, x0, t, r, beta)
        moved = v_old + 0.05 * (eps - x0 - v_old)
        toward, _ = diffusion_nft_loss(moved, v_old, x_t, x0, t, r, beta)
        assert sign * (float(toward) - float(at_old)) < 0


def test_loss_matches_the_formula_with_detached_adaptive_weights():
    x0, _, t, x_t, v_old = _batch(3)
    v = torch.randn(x0.shape, generator=torch.Generator().manual_seed(9)).requires_grad_(True)
    r, beta = torch.tensor([0.0, 0.25, 1.0]), 0.3
    tb = t.view(-1, 1, 1, 1)
    terms = []
    for v_imp in ((1 - beta) * v_old + beta * v, (1 + beta) * v_old - beta * v):
        res = (x_t - tb * v_imp - x0).flatten(1)
        terms.append(res.pow(2).mean(1) / res.detach().abs().mean(1).clamp_min(1e-5))
    want = (r * terms[0] + (1 - r) * terms[1]).mean()
    (want_grad,) = torch.autograd.grad(want, v)
    loss, stats = diffusion_nft_loss(v, v_old, x_t, x0, t, r, beta)
    assert float(loss.detach()) == pytest.approx(float(want.detach()), rel=1e-5)
    assert stats.policy_loss == pytest.approx(float(want.detach()), rel=1e-5) and stats.kl == 0.0
    (grad,) = torch.autograd.grad(loss, v)
    torch.testing.assert_close(grad, want_grad)  # the weights w carry no gradient
    v = v.detach()
    ref = torch.zeros_like(v)
    with_kl, stats = diffusion_nft_loss(v, v_old, x_t, x0, t, r, beta, ref, kl_beta=0.5)
    kl = float(v.flatten(1).pow(2).mean(1).mean())
    assert stats.kl == pytest.approx(kl, rel=1e-5)
    assert float(with_kl) == pytest.approx(float(want.detach()) + 0.5 * kl, rel=1e-5)


def test_optimality_maps_the_clipped_advantage_to_zero_one():
    adv = torch.tensor([5.0, -5.0, 0.0, 2.5, 7.0, -9.0])
    torch.testing.assert_close(
        nft_optimality(adv, 5.0), torch.tensor([1.0, 0.0, 0.5, 0.75, 1.0, 0.0])
    )
    torch.testing.assert_close(nft_optimality(torch.tensor([1.0]), 1.0), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="adv_clip"):
        nft_optimality(adv, 0.0)


def test_shape_and_beta_errors_are_refused():
    x0, _, t, x_t, v_old = _batch()
    r = torch.full((3,), 0.5)
    bad = [
        (v_old[:, :, :2], v_old, x_t, x0, t, r),  # velocity shape
        (v_old, v_old[:2], x_t, x0, t, r),  # old_velocity batch
        (v_old, v_old, x_t, x0[0], t, r),  # x0 without batch
        (v_old, v_old, x_t, x0, t[:2], r),  # t
        (v_old, v_old, x_t, x0, t, r[:, None]),  # optimality not (N,)
        (v_old[:, 0, 0, 0], v_old[:, 0, 0, 0], x_t[:, 0, 0, 0], x0[:, 0, 0, 0], t, r),  # 1-D
    ]
    for args in bad:
        with pytest.raises(ValueError, match="shapes differ"):
            diffusion_nft_loss(*args, beta=0.1)
    with pytest.raises(ValueError, match="shapes differ"):
        diffusion_nft_loss(v_old, v_old, x_t, x0, t, r, 0.1, ref_velocity=v_old[:1], kl_beta=1)
    for beta in (0.0, 1.5):
        with pytest.raises(ValueError, match="beta must be in"):
            diffusion_nft_loss(v_old, v_old, x_t, x0, t, r, beta)
    for field, value in (("nft_beta", 0.0), ("nft_beta", 1.01), ("nft_draws", 0)):
        with pytest.raises(ValueError, match=field):
            dataclasses.replace(NFT, **{field: value}).validate()
    NFT.validate()


def _rollout(policy):
    cfg = SamplerConfig(num_steps=3, eta=0.7, batch_size=8)
    return sample(policy, ["a cat"] * 4 + ["a dog"] * 4, list(range(8)), cfg)


def test_an_update_moves_the_weights_and_reports_finite_stats(small_policy):
    trajs = _rollout(small_policy)
    adv = group_advantages(torch.tensor([[1.0, 0.0, 0.5, 0.2], [0.0, 0.3, 0.0, 1.0]])).flatten()
    before = copy.deepcopy(small_policy.state_dict())
    ref = small_policy.frozen_reference()
    opt = torch.optim.AdamW(small_policy.trainable_parameters(), lr=1e-3)
    cfg = dataclasses.replace(NFT, kl_beta=0.01, train_batch_size=4)
    stats = grpo_update(small_policy, opt, trajs, adv, cfg, seed=0, ref_policy=ref)
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values())
    assert stats["grad_norm"] > 0 and stats["num_optimizer_steps"] == 2.0
    assert stats["ratio_mean"] == 1.0 and stats["policy_loss"] > 0
    assert stats["kl"] > 0  # the second chunk trains after a step away from the reference
    assert any(not torch.equal(v, before[k]) for k, v in small_policy.state_dict().items())


def test_zero_advantages_give_exactly_no_gradient(small_policy):
    """All-zero advantages: r = 1/2 everywhere and v_theta = v_old at the first step, so the
    positive and negative terms cancel exactly and plain SGD leaves every weight in place
    (over several chunks and epochs too: the weights never move, so v_theta stays v_old)."""
    trajs = _rollout(small_policy)
    before = copy.deepcopy(small_policy.state_dict())
    opt = torch.optim.SGD(small_policy.trainable_parameters(), lr=1.0)
    cfg = dataclasses.replace(NFT, train_batch_size=4, num_inner_epochs=2)
    stats = grpo_update(small_policy, opt, trajs, torch.zeros(8), cfg, seed=0)
    assert stats["grad_norm"] == 0.0 and stats["num_optimizer_steps"] == 4.0
    assert all(torch.equal(v, before[k]) for k, v in small_policy.state_dict().items())


def test_old_velocity_is_the_starting_policy_in_every_chunk_and_epoch(small_policy, monkeypatch):
    """v_old of each chunk, after earlier chunks and epochs have stepped, is still the
    velocity of the weights the update started with (at that chunk's x_t, t)."""
    start = copy.deepcopy(small_policy)
    seen = []
    real = update.diffusion_nft_loss

    def spy(velocity, old_velocity, x_t, x0, t, *args):
        seen.append((velocity.detach().clone(), old_velocity.clone(), x_t, t, x0))
        return real(velocity, old_velocity, x_t, x0, t, *args)

    monkeypatch.setattr(update, "diffusion_nft_loss", spy)
    trajs = _rollout(small_policy)
    adv = group_advantages(torch.tensor([[1.0, 0.0, 0.5, 0.2], [0.0, 0.3, 0.0, 1.0]])).flatten()
    opt = torch.optim.SGD(small_policy.trainable_parameters(), lr=0.5)
    cfg = dataclasses.replace(NFT, train_batch_size=4, num_inner_epochs=2, nft_draws=2)
    grpo_update(small_policy, opt, trajs, adv, cfg, seed=0)
    assert len(seen) == 2 * 2 * 2  # chunks x epochs x draws
    by_x0 = {tuple(tr.latents.flatten()[:4].tolist()): tr.prompt for tr in trajs}
    for k, (velocity, old, x_t, t, x0) in enumerate(seen):
        prompts = [by_x0[tuple(x.flatten()[:4].tolist())] for x in x0]
        with torch.no_grad():
            want = start.velocity(x_t, t, start.encode_prompts(prompts))
        torch.testing.assert_close(old, want, atol=1e-6, rtol=1e-5)
        # (t, eps) are the group-shared draws of awm_noise
        t0, eps0 = awm_noise(prompts[0], tuple(x0.shape[1:]), (0, k // 4, k % 2))
        assert float(t[0]) == pytest.approx(t0)
        torch.testing.assert_close(x_t[0], (1 - t0) * x0[0] + t0 * eps0)
        if k >= 2:  # after the first optimizer step the policy has moved away from v_old
            assert not torch.allclose(velocity, old, atol=1e-6)
        else:
            assert torch.equal(velocity, old)
