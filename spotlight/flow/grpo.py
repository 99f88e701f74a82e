"""GRPO math for flow models: group advantages, the clipped objective, the KL to a reference,
the advantage-weighted matching objective and DiffusionNFT's negative-aware objective.

Pure torch and no model: the single-process loop and the Ray Train workers call these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


def group_advantages(
    rewards: torch.Tensor,
    eps: float = 1e-4,
    clip: float = 5.0,
    pools: Sequence[Sequence[float] | None] | None = None,
) -> torch.Tensor:
    """Group-normalized advantages ``A_ij = (r_ij - mean_j r_i) / (std_j r_i + eps)``.

    Args:
        rewards: ``(num_prompts, group_size)``; each row is one prompt's group.
        eps: added to the (population) std; a zero-variance group gets all-zero advantages.
        clip: advantages are clipped to ``[-clip, clip]``.
        pools: per row, None or the rewards of all the candidates the group was selected from:
            that row's mean and std are then the pool's (``mean_k p_ik``, ``std_k p_ik``), not
            the group's, so a kept extreme is measured against every candidate.

    Raises:
        ValueError: rewards is not 2-D, the group size is < 2, or a reward is not finite.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be (num_prompts, group_size), got {tuple(rewards.shape)}")
    if rewards.shape[1] < 2:
        raise ValueError(f"group size must be >= 2 for group advantages, got {rewards.shape[1]}")
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards contain NaN or inf")
    r = rewards.double()
    mean, std = r.mean(dim=1, keepdim=True), r.std(dim=1, unbiased=False, keepdim=True)
    if pools is not None:
        if len(pools) != r.shape[0]:
            raise ValueError(f"{len(pools)} pools for {r.shape[0]} groups")
        for i, pool in enumerate(pools):
            if pool is not None:
                p = torch.tensor(pool, dtype=torch.float64)
                mean[i, 0], std[i, 0] = p.mean(), p.std(unbiased=False)
    adv = (r - mean) / (std + eps)
    return adv.clamp(-clip, clip).float()


@dataclass
class LossStats:
    """Diagnostics of one loss evaluation (Python floats)."""

    policy_loss: float
    kl: float
    clip_frac: float
    ratio_mean: float
    approx_kl: float


def grpo_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip_range: float,
    kl: torch.Tensor | None = None,
    kl_beta: float = 0.0,
) -> tuple[torch.Tensor, LossStats]:
    """Clipped GRPO objective for one denoising step of a batch of samples.

    ``ratio = exp(log_prob - old_log_prob)``;
    ``L = mean(max(-A ratio, -A clip(ratio, 1 - c, 1 + c))) + beta * mean(kl)``.

    Args:
        log_prob: ``(N,)`` log-probs under the current weights (with grad).
        old_log_prob: ``(N,)`` log-probs recorded at sampling time.
        advantages: ``(N,)``.
        clip_range: c.
        kl: ``(N,)`` per-sample KL to the reference policy, or None.
        kl_beta: weight of the KL term.
    """
    if not log_prob.shape == old_log_prob.shape == advantages.shape:
        raise ValueError(
            f"shapes differ: log_prob {tuple(log_prob.shape)}, old_log_prob "
            f"{tuple(old_log_prob.shape)}, advantages {tuple(advantages.shape)}"
        )
    adv = advantages.to(log_prob.device, torch.float32)
    log_ratio = log_prob.float() - old_log_prob.to(log_prob.device, torch.float32)
    ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    policy_loss = torch.maximum(unclipped, clipped).mean()
    loss = policy_loss
    kl_mean = torch.zeros((), device=log_prob.device)
    if kl is not None and kl_beta > 0:
        kl_mean = kl.float().mean()
        loss = loss + kl_beta * kl_mean
    with torch.no_grad():
        stats = LossStats(
            policy_loss=float(policy_loss.detach()),
            kl=float(kl_mean.detach()),
            clip_frac=float(((ratio - 1.0).abs() > clip_range).float().mean()),
            ratio_mean=float(ratio.mean()),
            approx_kl=float((0.5 * log_ratio * log_ratio).mean()),
        )
    return loss, stats


def gaussian_mean_kl(mean: torch.Tensor, ref_mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """KL between two Gaussians with the same std, per sample, averaged over elements.

    ``KL(N(mu, s^2) || N(mu_ref, s^2)) = (mu - mu_ref)^2 / (2 s^2)`` (Flow-GRPO's KL term).
    ``std`` is ``(N,)``.
    """
    diff = (mean.float() - ref_mean.float()).flatten(1)
    return (diff * diff).mean(dim=1) / (2.0 * std.float() ** 2)


def advantage_weighted_matching_loss(
    velocity: torch.Tensor,
    target: torch.Tensor,
    advantages: torch.Tensor,
    ref_velocity: torch.Tensor | None = None,
    kl_beta: float = 0.0,
) -> tuple[torch.Tensor, LossStats]:
    """Advantage-weighted flow matching (AWM) for one noise draw of a batch of samples.

    ``L = mean_i(A_i * e_i) + beta * mean_i |v_i - v_ref,i|^2`` with
    ``e_i = mean |v_i - (eps_i - x0_i)|^2``, the pretraining loss of sample ``x0_i`` noised to
    ``x_t = (1 - t) x0 + t eps``. Descending it lowers the denoising error of the samples that
    scored above their group's mean and raises it on those below: the policy-gradient direction
    of a diffusion model expressed through its own training loss (Xue et al. 2025, "Advantage
    Weighted Matching"), with no per-step log-probabilities, so the sampler may be any (ODE or
    SDE, any step count). When the members of a group share ``(t, eps)``, the part of the
    gradient that does not depend on ``x0`` cancels, because a group's advantages sum to zero.

    Args:
        velocity: ``(N, ...)`` the policy's velocity at the noised samples (with grad).
        target: ``(N, ...)`` ``eps - x0``.
        advantages: ``(N,)``.
        ref_velocity: the reference policy's velocity at the same inputs, or None.
        kl_beta: weight of the squared velocity distance to the reference (the KL between the
            two flows' Gaussian steps, up to a per-step constant).

    ``LossStats.kl`` is that distance; the ratio fields keep their neutral values (1, 0, 0):
    there is no ratio.
    """
    if velocity.shape != target.shape or advantages.shape != velocity.shape[:1]:
        raise ValueError(
            f"shapes differ: velocity {tuple(velocity.shape)}, target {tuple(target.shape)}, "
            f"advantages {tuple(advantages.shape)}"
        )
    err = (velocity.float() - target.float()).flatten(1).pow(2).mean(dim=1)
    policy_loss = (advantages.to(err.device, torch.float32) * err).mean()
    return _with_velocity_kl(policy_loss, velocity, ref_velocity, kl_beta)


def _with_velocity_kl(
    policy_loss: torch.Tensor,
    velocity: torch.Tensor,
    ref_velocity: torch.Tensor | None,
    kl_beta: float,
) -> tuple[torch.Tensor, LossStats]:
    """``policy_loss + kl_beta * mean_i |v_i - v_ref,i|^2`` and its stats, for the objectives on
    final samples (no ratio: the ratio fields keep their neutral values 1, 0, 0)."""
    loss = policy_loss
    kl_mean = torch.zeros((), device=policy_loss.device)
    if ref_velocity is not None and kl_beta > 0:
        diff = velocity.float() - ref_velocity.to(velocity.device, torch.float32)
        kl_mean = diff.flatten(1).pow(2).mean(dim=1).mean()
        loss = loss + kl_beta * kl_mean
    stats = LossStats(
        policy_loss=float(policy_loss.detach()),
        kl=float(kl_mean.detach()),
        clip_frac=0.0,
        ratio_mean=1.0,
        approx_kl=0.0,
    )
    return loss, stats


def nft_optimality(advantages: torch.Tensor, adv_clip: float) -> torch.Tensor:
    """DiffusionNFT's optimality probability ``r = clip(A / (2 adv_clip) + 1/2, 0, 1)``.

    ``A = +adv_clip`` maps to 1 (train on the sample as a positive), ``-adv_clip`` to 0 (as a
    negative), 0 to 1/2 (no preference); advantages beyond the clip clamp.
    """
    if adv_clip <= 0:
        raise ValueError(f"adv_clip must be > 0, got {adv_clip}")
    return (advantages.float() / (2.0 * adv_clip) + 0.5).clamp(0.0, 1.0)


def diffusion_nft_loss(
    velocity: torch.Tensor,
    old_velocity: torch.Tensor,
    x_t: torch.Tensor,
    x0: torch.Tensor,
    t: torch.Tensor,
    optimality: torch.Tensor,
    beta: float,
    ref_velocity: torch.Tensor | None = None,
    kl_beta: float = 0.0,
    min_weight: float = 1e-5,
) -> tuple[torch.Tensor, LossStats]:
    """DiffusionNFT (Zheng et al. 2025, "DiffusionNFT: Online Diffusion Reinforcement with
    Forward Process") for one noise draw of a batch of samples.

    With ``d = v_theta - v_old``, the implicit positive and negative policies
    ``v+ = v_old + beta d`` and ``v- = v_old - beta d`` (the paper's ``(1 - beta) v_old + beta
    v_theta`` and ``(1 + beta) v_old - beta v_theta``, written so that ``v+`` and ``v-`` are
    bit-identical at ``v_theta = v_old``) each predict ``x0_hat(v) = x_t - t v``, and

    ``L = mean_i(r_i e+_i / w+_i + (1 - r_i) e-_i / w-_i) + kl_beta * mean_i |v_i - v_ref,i|^2``

    with ``e_i = mean |x0_hat - x0_i|^2`` and ``w_i = max(mean |x0_hat - x0_i|, min_weight)``,
    detached (the paper's adaptive weighting). Descending it fits ``v+`` to the samples with
    ``r ~ 1`` and ``v-`` to those with ``r ~ 0``. At ``v_theta = v_old`` its gradient in
    ``v_theta`` is ``(2 r_i - 1) beta / w_i`` times that of ``e_i`` as a function of the
    velocity, ``t_i^2 |v - (eps_i - x0_i)|^2`` (the flow-matching error in x0 space): samples
    with ``r > 1/2`` pull the velocity toward their flow-matching target, those with
    ``r < 1/2`` push it away, and ``r = 1/2`` gives exactly none. Like AWM it needs no per-step
    log-probabilities, so the sampler may be any.

    Not scaled by ``adv_clip / beta`` as the reference implementation's
    ``policy_loss`` is (scripts/train_nft_sd3.py); with AdamW that factor changes little but the
    clipping threshold and the weight of the KL term relative to the policy loss.

    Args:
        velocity: ``(N, ...)`` ``v_theta``, the current policy's velocity at ``x_t`` (with grad).
        old_velocity: ``(N, ...)`` ``v_old``, the sampling policy's velocity (no grad needed;
            detached here).
        x_t: ``(N, ...)`` the noised samples ``(1 - t) x0 + t eps``.
        x0: ``(N, ...)`` the final samples.
        t: ``(N,)`` noise levels in [0, 1].
        optimality: ``(N,)`` ``r`` in [0, 1] (:func:`nft_optimality`).
        beta: in (0, 1], how far the implicit policies move from ``v_old``.
        ref_velocity: the reference policy's velocity at the same inputs, or None.
        kl_beta: weight of the squared velocity distance to the reference.
        min_weight: floor of the adaptive weights.

    Raises:
        ValueError: shapes disagree, or ``beta`` is outside (0, 1].

    ``LossStats.kl`` is the distance to the reference; the ratio fields keep their neutral
    values (1, 0, 0): there is no ratio.
    """
    shapes = (velocity.shape, old_velocity.shape, x_t.shape, x0.shape)
    if (
        velocity.dim() < 2
        or len(set(shapes)) != 1
        or t.shape != velocity.shape[:1]
        or optimality.shape != velocity.shape[:1]
        or (ref_velocity is not None and ref_velocity.shape != velocity.shape)
    ):
        raise ValueError(
            f"shapes differ: velocity {tuple(velocity.shape)}, old_velocity "
            f"{tuple(old_velocity.shape)}, x_t {tuple(x_t.shape)}, x0 {tuple(x0.shape)}, "
            f"t {tuple(t.shape)}, optimality {tuple(optimality.shape)}"
            + ("" if ref_velocity is None else f", ref_velocity {tuple(ref_velocity.shape)}")
            + " (need (N, ...) tensors of one shape and (N,) t and optimality)"
        )
    if not 0.0 < beta <= 1.0:
        raise ValueError(f"beta must be in (0, 1], got {beta}")
    device = velocity.device
    v = velocity.float().flatten(1)
    v_old = old_velocity.detach().to(device, torch.float32).flatten(1)
    xt = x_t.to(device, torch.float32).flatten(1)
    x0f = x0.to(device, torch.float32).flatten(1)
    tb = t.to(device, torch.float32)[:, None]
    r = optimality.to(device, torch.float32)
    step = beta * (v - v_old)

    def weighted_error(v_implicit: torch.Tensor) -> torch.Tensor:
        res = xt - tb * v_implicit - x0f
        w = res.detach().abs().mean(dim=1).clamp_min(min_weight)
        return res.pow(2).mean(dim=1) / w

    per_sample = r * weighted_error(v_old + step) + (1.0 - r) * weighted_error(v_old - step)
    return _with_velocity_kl(per_sample.mean(), velocity, ref_velocity, kl_beta)
