"""One GRPO update of a policy from finished trajectories (local loop and Ray Train share it)."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import asdict

import torch

from spotlight.config import GRPOConfig
from spotlight.grpo import (
    LossStats,
    advantage_weighted_matching_loss,
    gaussian_mean_kl,
    grpo_loss,
)
from spotlight.policies.base import Policy
from spotlight.sampler import Trajectory, step_log_prob
from spotlight.sde import step_params, time_grid


def train_step_indices(num_steps: int, fraction: float, seed: int) -> list[int]:
    """The denoising steps trained on this iteration: a seeded random subset, sorted.

    ``max(1, round(fraction * num_steps))`` of the ``num_steps`` steps.
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"timestep fraction must be in (0, 1], got {fraction}")
    k = max(1, round(fraction * num_steps))
    return sorted(random.Random(seed).sample(range(num_steps), k))


def grpo_update(
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    trajectories: list[Trajectory],
    advantages: torch.Tensor,
    cfg: GRPOConfig,
    seed: int,
    ref_policy: Policy | None = None,
    shard: tuple[int, int] = (0, 1),
    grad_sync: Callable[[list[torch.nn.Parameter]], None] | None = None,
) -> dict[str, float]:
    """Replay the trajectories under the current weights and take GRPO optimizer steps.

    Samples are shuffled (seeded) into chunks of ``cfg.train_batch_size``; each chunk
    accumulates the loss over the selected steps and takes one optimizer step; this repeats for
    ``cfg.num_inner_epochs``. Returns the mean of each loss statistic.

    ``cfg.loss`` picks the objective: ``'flow_grpo'`` replays a seeded subset of the denoising
    steps (``cfg.timestep_fraction``) and uses their log-probs; ``'awm'`` uses only the final
    samples, noised ``cfg.awm_draws`` times with ``(t, eps)`` shared by a prompt's group
    (:func:`awm_noise`).

    Data parallel: with ``shard=(rank, world)`` this process replays only ``chunk[rank::world]``
    of each chunk, and ``grad_sync`` (e.g. an all-reduce mean) runs on the gradients before
    each optimizer step; with equal slices that is the full chunk's gradient. Every rank draws
    the same chunks (same seed), so the slices partition the batch.
    """
    rank, world = shard
    if not 0 <= rank < world:
        raise ValueError(f"shard {shard}: need 0 <= rank < world")
    if world > 1 and min(cfg.train_batch_size, len(trajectories)) < world:
        raise ValueError(
            f"{world} data-parallel ranks need chunks of at least {world} samples "
            f"(train_batch_size {cfg.train_batch_size}, {len(trajectories)} trajectories)"
        )
    if len(trajectories) != advantages.numel():
        raise ValueError(f"{len(trajectories)} trajectories but {advantages.numel()} advantages")
    unfinished = [i for i, tr in enumerate(trajectories) if not tr.done]
    if unfinished:
        raise ValueError(f"trajectories {unfinished[:5]} are not finished")
    if cfg.kl_beta > 0 and ref_policy is None:
        raise ValueError("kl_beta > 0 needs a reference policy")
    sampler = trajectories[0].sampler
    steps = train_step_indices(sampler.num_steps, cfg.timestep_fraction, seed)
    grid = time_grid(sampler.num_steps, sampler.shift)
    params = [step_params(grid, j, sampler.eta) for j in steps]
    rng = random.Random(seed + 1)
    history: list[LossStats] = []
    grad_norms: list[float] = []
    for epoch in range(cfg.num_inner_epochs):
        order = list(range(len(trajectories)))
        rng.shuffle(order)
        for lo in range(0, len(order), cfg.train_batch_size):
            idx = order[lo : lo + cfg.train_batch_size][rank::world]
            chunk = [trajectories[i] for i in idx]
            adv = advantages.flatten()[idx]
            optimizer.zero_grad(set_to_none=True)
            if not chunk:
                pass
            elif cfg.loss == "awm":
                for draw in range(cfg.awm_draws):
                    key = (seed, epoch, draw)
                    loss, stats = _awm_loss(policy, ref_policy, chunk, adv, key, cfg)
                    (loss / cfg.awm_draws).backward()
                    history.append(stats)
            else:
                for j, p in zip(steps, params, strict=True):
                    loss, stats = _step_loss(policy, ref_policy, chunk, adv, j, p, cfg)
                    (loss / len(steps)).backward()
                    history.append(stats)
            if grad_sync is not None:
                grad_sync(policy.trainable_parameters())
            grad_norms.append(_clip_and_step(policy, optimizer, cfg.max_grad_norm))
    out = {k: sum(getattr(s, k) for s in history) / len(history) for k in asdict(history[0])}
    out["grad_norm"] = sum(grad_norms) / len(grad_norms)
    out["num_optimizer_steps"] = float(len(grad_norms))
    return out


def _step_loss(policy, ref_policy, chunk, adv, j, p, cfg):
    x = torch.stack([tr.xs[j] for tr in chunk])
    x_next = torch.stack([tr.xs[j + 1] for tr in chunk])
    old = torch.tensor([tr.log_probs[j] for tr in chunk], dtype=torch.float32)
    guidance = chunk[0].sampler.guidance_scale
    cond = policy.encode_prompts([tr.prompt for tr in chunk])
    log_prob, mean = step_log_prob(policy, x, x_next, [p] * len(chunk), cond, guidance)
    kl = None
    if cfg.kl_beta > 0:
        with torch.no_grad():
            ref_cond = ref_policy.encode_prompts([tr.prompt for tr in chunk])
            _, ref_mean = step_log_prob(ref_policy, x, x_next, [p] * len(chunk), ref_cond, guidance)
        kl = gaussian_mean_kl(mean, ref_mean, torch.full((len(chunk),), p.std))
    return grpo_loss(
        log_prob, old.to(log_prob.device), adv.to(log_prob.device), cfg.clip_range, kl, cfg.kl_beta
    )


def awm_noise(
    prompt: str, shape: tuple[int, ...], key: tuple[int, ...]
) -> tuple[float, torch.Tensor]:
    """The ``(t, eps)`` of one AWM noise draw: logit-normal ``t`` (as in pretraining) and
    Gaussian ``eps``, a function of the prompt and ``key`` only, so every member of a prompt's
    group (and every data-parallel rank) gets the same draw."""
    digest = hashlib.blake2b(f"{key}|{prompt}".encode(), digest_size=8).digest()
    gen = torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)
    t = float(torch.sigmoid(torch.randn((), generator=gen)))
    return t, torch.randn(shape, generator=gen)


def _awm_loss(policy, ref_policy, chunk, adv, key, cfg):
    device = policy.device
    x0 = torch.stack([tr.latents for tr in chunk]).float()
    draws = [awm_noise(tr.prompt, tuple(x0.shape[1:]), key) for tr in chunk]
    t = torch.tensor([d[0] for d in draws], dtype=torch.float32)
    eps = torch.stack([d[1] for d in draws])
    tb = t.view(-1, *([1] * (x0.dim() - 1)))
    x_t = ((1.0 - tb) * x0 + tb * eps).to(device)
    prompts = [tr.prompt for tr in chunk]
    velocity = policy.velocity(x_t, t.to(device), policy.encode_prompts(prompts))
    ref_velocity = None
    if cfg.kl_beta > 0:
        with torch.no_grad():
            ref_velocity = ref_policy.velocity(
                x_t, t.to(device), ref_policy.encode_prompts(prompts)
            )
    return advantage_weighted_matching_loss(
        velocity, (eps - x0).to(device), adv.to(device), ref_velocity, cfg.kl_beta
    )


def _clip_and_step(policy: Policy, optimizer: torch.optim.Optimizer, max_norm: float) -> float:
    params = policy.trainable_parameters()
    if max_norm > 0:
        norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    else:
        norm = float(
            torch.linalg.vector_norm(
                torch.stack([g.grad.norm() for g in params if g.grad is not None])
            )
        )
    optimizer.step()
    return norm
