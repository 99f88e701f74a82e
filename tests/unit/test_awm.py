"""Advantage-weighted matching (grpo.loss = 'awm'): the loss, its noise draws, the update."""

import copy
import dataclasses

import pytest
import torch

from spotlight.config import GRPOConfig, SamplerConfig
from spotlight.flow.grpo import advantage_weighted_matching_loss, group_advantages
from spotlight.flow.sampler import sample
from spotlight.flow.update import awm_noise, grpo_update

AWM = GRPOConfig(group_size=4, train_batch_size=8, loss="awm", awm_draws=3)


def test_loss_is_the_advantage_weighted_mean_of_per_sample_errors():
    v = torch.tensor([[1.0, 1.0], [0.0, 2.0], [3.0, 0.0]], requires_grad=True)
    target = torch.zeros(3, 2)
    adv = torch.tensor([1.0, -2.0, 0.5])
    loss, stats = advantage_weighted_matching_loss(v, target, adv)
    # per-sample errors: 1, 2, 4.5 -> (1 - 4 + 2.25) / 3
    assert loss.item() == pytest.approx(-0.25)
    assert stats.policy_loss == pytest.approx(-0.25) and stats.kl == 0.0
    loss.backward()
    # d/dv of A_i * mean_j (v_ij)^2 / N = A_i * 2 v_ij / (2 * 3)
    torch.testing.assert_close(v.grad, adv[:, None] * v.detach() / 3)


def test_kl_term_is_the_velocity_distance_to_the_reference():
    v = torch.tensor([[1.0, 3.0]])
    loss, stats = advantage_weighted_matching_loss(
        v, torch.zeros(1, 2), torch.zeros(1), ref_velocity=torch.tensor([[0.0, 1.0]]), kl_beta=0.1
    )
    assert stats.kl == pytest.approx(2.5) and loss.item() == pytest.approx(0.25)
    with pytest.raises(ValueError, match="shapes differ"):
        advantage_weighted_matching_loss(v, torch.zeros(1, 3), torch.zeros(1))
    with pytest.raises(ValueError, match="shapes differ"):
        advantage_weighted_matching_loss(v, torch.zeros(1, 2), torch.zeros(2))


def test_noise_draws_are_shared_by_a_prompt_and_differ_between_prompts_and_keys():
    t1, e1 = awm_noise("a cat", (1, 4, 4), (0, 0, 1))
    t2, e2 = awm_noise("a cat", (1, 4, 4), (0, 0, 1))
    assert t1 == t2 and torch.equal(e1, e2) and 0.0 < t1 < 1.0
    t3, e3 = awm_noise("a dog", (1, 4, 4), (0, 0, 1))
    t4, e4 = awm_noise("a cat", (1, 4, 4), (0, 0, 2))
    assert not torch.equal(e1, e3) and not torch.equal(e1, e4) and t1 not in (t3, t4)


def _rollout(policy):
    cfg = SamplerConfig(num_steps=3, eta=0.7, batch_size=8)
    return sample(policy, ["a cat"] * 4 + ["a dog"] * 4, list(range(8)), cfg)


def _grad(policy):
    return torch.cat(
        [p.grad.flatten() for p in policy.trainable_parameters() if p.grad is not None]
    )


def test_identical_samples_in_a_group_give_exactly_no_gradient(small_policy):
    """Shared (t, eps) within a group: whatever the advantages, a group whose samples are all
    the same image has no preference to express, and its gradient terms cancel."""
    trajs = _rollout(small_policy)
    for tr in trajs[1:4]:
        tr.latents = trajs[0].latents.clone()
    for tr in trajs[5:]:
        tr.latents = trajs[4].latents.clone()
    opt = torch.optim.SGD(small_policy.trainable_parameters(), lr=0.0)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -1.0, -0.5, -0.5])
    grpo_update(small_policy, opt, trajs, adv, AWM, seed=0)
    assert float(_grad(small_policy).abs().max()) < 1e-6
    # ... while distinct samples with the same advantages do give one.
    grpo_update(small_policy, opt, _rollout(small_policy), adv, AWM, seed=0)
    assert float(_grad(small_policy).abs().max()) > 1e-4


def test_a_step_makes_the_better_sample_more_likely_than_the_worse_one(small_policy):
    """One small SGD step lowers the denoising error of the positively-weighted samples
    relative to the negatively-weighted ones (at fresh noise draws)."""
    trajs = _rollout(small_policy)
    adv = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]])).flatten()

    def errors(policy):
        out = []
        with torch.no_grad():
            for tr in trajs:
                errs = []
                for draw in range(16):
                    t, eps = awm_noise(tr.prompt, tuple(tr.latents.shape), (99, draw))
                    x_t = (1 - t) * tr.latents + t * eps
                    v = policy.velocity(
                        x_t[None], torch.tensor([t]), policy.encode_prompts([tr.prompt])
                    )
                    errs.append(float(((v[0] - (eps - tr.latents)) ** 2).mean()))
                out.append(sum(errs) / len(errs))
        return torch.tensor(out)

    before = errors(small_policy)
    policy = copy.deepcopy(small_policy)
    opt = torch.optim.SGD(policy.trainable_parameters(), lr=0.05)
    cfg = dataclasses.replace(AWM, awm_draws=8, max_grad_norm=0.0)
    stats = grpo_update(policy, opt, trajs, adv, cfg, seed=0)
    change = errors(policy) - before
    good, bad = adv > 0, adv < 0
    assert float(change[good].mean()) < float(change[bad].mean())
    assert stats["ratio_mean"] == 1.0 and stats["num_optimizer_steps"] == 1.0


def test_zero_advantages_change_nothing_and_the_loss_name_is_checked(small_policy):
    trajs = _rollout(small_policy)
    before = copy.deepcopy(small_policy.state_dict())
    opt = torch.optim.SGD(small_policy.trainable_parameters(), lr=1.0)
    grpo_update(small_policy, opt, trajs, torch.zeros(8), AWM, seed=0)
    assert all(torch.equal(v, before[k]) for k, v in small_policy.state_dict().items())
    with pytest.raises(ValueError, match="loss must be one of"):
        GRPOConfig(loss="dpo").validate()
    with pytest.raises(ValueError, match="awm_draws"):
        GRPOConfig(loss="awm", awm_draws=0).validate()
