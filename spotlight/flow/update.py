"""One GRPO update of a policy from finished trajectories (local loop and Ray Train share it)."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict

import torch

from spotlight.config import GRPOConfig, trained_step_count
from spotlight.flow.grpo import (
    LossStats,
    advantage_weighted_matching_loss,
    diffusion_nft_loss,
    gaussian_mean_kl,
    grpo_loss,
    nft_optimality,
)
from spotlight.flow.old_policy import OldPolicy
from spotlight.flow.sampler import Trajectory, step_log_prob
from spotlight.flow.sde import step_params, time_grid
from spotlight.policies.base import Policy


def training_state(policy: Policy, cfg: GRPOConfig) -> tuple[torch.optim.Optimizer, Policy | None]:
    """The optimizer over the policy's trainable parameters and the frozen KL reference (None
    without a KL term): what a run's updates need besides the policy. Both runners (the
    reference loop and the Ray Train worker) build them here."""
    optimizer = torch.optim.AdamW(
        policy.trainable_parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay
    )
    return optimizer, (policy.frozen_reference() if cfg.kl_beta > 0 else None)


def train_step_indices(
    num_steps: int, fraction: float, seed: int, window: tuple[int, int] | None = None
) -> list[int]:
    """The denoising steps trained on this iteration: a seeded random subset, sorted.

    ``max(1, round(fraction * n))`` of the ``n`` steps of ``window = [start, end)`` (the
    sampler's SDE window; None = all ``num_steps`` steps, the same subset as ``(0, num_steps)``).
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"timestep fraction must be in (0, 1], got {fraction}")
    start, end = (0, num_steps) if window is None else window
    if not 0 <= start < end <= num_steps:
        raise ValueError(
            f"step window [{start}, {end}) must satisfy 0 <= start < end <= {num_steps}"
        )
    k = trained_step_count(fraction, (start, end))
    return sorted(random.Random(seed).sample(range(start, end), k))


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
    old_policy: OldPolicy | None = None,
) -> dict[str, float]:
    """Replay the trajectories under the current weights and take GRPO optimizer steps.

    Samples are shuffled (seeded) into chunks of ``cfg.train_batch_size``; each chunk
    accumulates the loss over the selected steps and takes one optimizer step; this repeats for
    ``cfg.num_inner_epochs``. Returns the mean of each loss statistic.

    ``cfg.loss`` picks the objective: ``'flow_grpo'`` replays a seeded subset of the denoising
    steps (``cfg.timestep_fraction`` of the sampler's SDE window: ODE steps outside it have no
    log-prob) and uses their log-probs, at the window's noise level; ``'awm'`` uses only the final
    samples, noised ``cfg.awm_draws`` times with ``(t, eps)`` shared by a prompt's group
    (:func:`awm_noise`); ``'nft'`` (DiffusionNFT) likewise, ``cfg.nft_draws`` times, against
    ``v_old``, the velocity of the sampling policy: ``old_policy``'s parameters
    (``grpo.nft_old_ema``), else the weights this call started with. ``v_old`` of every chunk
    and epoch is computed up front, before the first optimizer step, with one no-grad forward
    per sample and draw (:func:`_nft_old_velocities`, with the old parameters swapped in), and
    kept until its chunk trains (one latent-sized tensor per sample and draw); except that of
    the first chunk of the first epoch while the sampling policy is the starting weights (no
    ``old_policy``, or one equal to the policy bit for bit): that is its own forward's output.

    Data parallel: with ``shard=(rank, world)`` this process replays only ``chunk[rank::world]``
    of each chunk, and ``grad_sync`` (e.g. an all-reduce mean) runs on the gradients before
    each optimizer step; with equal slices that is the full chunk's gradient. Every rank draws
    the same chunks (same seed), so the slices partition the batch.
    """
    _check_inputs(trajectories, advantages, cfg, shard, ref_policy, old_policy)
    sampler = trajectories[0].sampler
    steps = train_step_indices(
        sampler.num_steps, cfg.timestep_fraction, seed, window=sampler.sde_window
    )
    grid = time_grid(sampler.num_steps, sampler.shift)
    params = [step_params(grid, j, sampler.sde_eta) for j in steps]
    plan = _chunk_plan(len(trajectories), cfg, seed, shard)
    old_velocities = (
        _nft_old_velocities(policy, trajectories, plan, seed, cfg, old_policy)
        if cfg.loss == "nft"
        else {}
    )
    history: list[LossStats] = []
    grad_norms: list[float] = []
    for k, (epoch, idx) in enumerate(plan):
        chunk = [trajectories[i] for i in idx]
        adv = advantages.flatten()[idx]
        optimizer.zero_grad(set_to_none=True)
        if chunk:  # (a rank's slice of the last chunk may be empty)
            for part, weight, stats in _chunk_losses(
                policy, ref_policy, chunk, adv, cfg, (seed, epoch), steps, params,
                lambda draw, k=k: old_velocities.pop((k, draw), None),
            ):  # fmt: skip
                (part / weight).backward()
                history.append(stats)
        if grad_sync is not None:
            grad_sync(policy.trainable_parameters())
        grad_norms.append(_clip_and_step(policy, optimizer, cfg.max_grad_norm))
    out = {k: sum(getattr(s, k) for s in history) / len(history) for k in asdict(history[0])}
    out["grad_norm"] = sum(grad_norms) / len(grad_norms)
    out["num_optimizer_steps"] = float(len(grad_norms))
    return out


def _check_inputs(trajectories, advantages, cfg: GRPOConfig, shard, ref_policy, old) -> None:
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
    if cfg.loss not in ("flow_grpo", "awm", "nft"):
        raise ValueError(f"unknown grpo.loss {cfg.loss!r}")
    if old is not None and cfg.loss != "nft":
        raise ValueError(f"an old policy is DiffusionNFT's (loss 'nft'), not {cfg.loss!r}'s")
    if cfg.loss == "flow_grpo":
        _check_same_steps(trajectories)


def _chunk_plan(n: int, cfg: GRPOConfig, seed: int, shard) -> list[tuple[int, list[int]]]:
    """``(epoch, this rank's sample indices)`` per chunk: each epoch a seeded shuffle of the
    ``n`` samples cut into chunks of ``cfg.train_batch_size``, of which this rank takes
    ``chunk[rank::world]``."""
    rank, world = shard
    rng = random.Random(seed + 1)
    plan: list[tuple[int, list[int]]] = []
    for epoch in range(cfg.num_inner_epochs):
        order = list(range(n))
        rng.shuffle(order)
        for lo in range(0, len(order), cfg.train_batch_size):
            plan.append((epoch, order[lo : lo + cfg.train_batch_size][rank::world]))
    return plan


def _chunk_losses(policy, ref_policy, chunk, adv, cfg: GRPOConfig, key, steps, params, v_old):
    """The loss terms of one chunk, each as ``(loss, divisor, stats)``: one per noise draw
    (AWM, NFT; ``v_old(draw)`` gives NFT's precomputed old velocity or None) or per replayed
    step (Flow-GRPO). Yielded one at a time so each backward frees its graph first."""
    seed, epoch = key
    if cfg.loss == "awm":
        for draw in range(cfg.awm_draws):
            loss, stats = _awm_loss(policy, ref_policy, chunk, adv, (seed, epoch, draw), cfg)
            yield loss, cfg.awm_draws, stats
    elif cfg.loss == "nft":
        for draw in range(cfg.nft_draws):
            loss, stats = _nft_loss(
                policy, ref_policy, chunk, adv, (seed, epoch, draw), v_old(draw), cfg
            )
            yield loss, cfg.nft_draws, stats
    else:
        for j, p in zip(steps, params, strict=True):
            loss, stats = _step_loss(policy, ref_policy, chunk, adv, j, p, cfg)
            yield loss, len(steps), stats


def _check_same_steps(trajectories: list[Trajectory]) -> None:
    """Raise unless every trajectory took the same steps (grid, SDE window and noise level,
    guidance): the replay uses the first one's for all."""

    def steps(s):
        return s.num_steps, s.shift, s.sde_window, s.sde_eta, s.guidance_scale

    first = steps(trajectories[0].sampler)
    other = [i for i, tr in enumerate(trajectories) if steps(tr.sampler) != first]
    if other:
        raise ValueError(
            f"trajectories {other[:5]} were sampled with other steps (num_steps, shift,"
            f" sde_window, sde eta, guidance) than trajectory 0 {first}: 'flow_grpo' replays"
            " one set of steps"
        )


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


def _noised(chunk, key):
    """``(x0, t, eps, x_t)`` of a chunk's final samples at the noise draw ``key`` (CPU)."""
    x0 = torch.stack([tr.latents for tr in chunk]).float()
    draws = [awm_noise(tr.prompt, tuple(x0.shape[1:]), key) for tr in chunk]
    t = torch.tensor([d[0] for d in draws], dtype=torch.float32)
    eps = torch.stack([d[1] for d in draws])
    tb = t.view(-1, *([1] * (x0.dim() - 1)))
    return x0, t, eps, (1.0 - tb) * x0 + tb * eps


def _ref_velocity(ref_policy, x_t, t, prompts, cfg):
    """The frozen reference's velocity at ``(x_t, t)`` for the KL term, or None without one."""
    if cfg.kl_beta <= 0:
        return None
    with torch.no_grad():
        return ref_policy.velocity(x_t, t, ref_policy.encode_prompts(prompts))


def _awm_loss(policy, ref_policy, chunk, adv, key, cfg):
    device = policy.device
    x0, t, eps, x_t = _noised(chunk, key)
    x_t = x_t.to(device)
    prompts = [tr.prompt for tr in chunk]
    velocity = policy.velocity(x_t, t.to(device), policy.encode_prompts(prompts))
    ref_velocity = _ref_velocity(ref_policy, x_t, t.to(device), prompts, cfg)
    return advantage_weighted_matching_loss(
        velocity, (eps - x0).to(device), adv.to(device), ref_velocity, cfg.kl_beta
    )


def _nft_old_velocities(policy, trajectories, plan, seed, cfg, old_policy=None):
    """``v_old`` of the chunks at every draw: ``{(chunk, draw): velocity}`` of the sampling
    policy (call it before any optimizer step): ``old_policy``'s parameters swapped in, or the
    current weights without one. Each is computed on the same rows as its chunk's training
    forward, so it is what that forward would give at these weights. The first chunk needs
    none while the sampling policy is the current weights: it trains before the first
    optimizer step, and its own forward gives ``v_old``."""
    first, weights = 1, nullcontext()
    if old_policy is not None and not old_policy.matches(policy):
        first, weights = 0, old_policy.applied(policy)
    out = {}
    with torch.no_grad(), weights:
        for k, (epoch, idx) in enumerate(plan[first:], start=first):
            chunk = [trajectories[i] for i in idx]
            if not chunk:
                continue
            prompts = [tr.prompt for tr in chunk]
            for draw in range(cfg.nft_draws):
                _, t, _, x_t = _noised(chunk, (seed, epoch, draw))
                out[(k, draw)] = policy.velocity(
                    x_t.to(policy.device), t.to(policy.device), policy.encode_prompts(prompts)
                ).detach()
    return out


def _nft_loss(policy, ref_policy, chunk, adv, key, old_velocity, cfg):
    """DiffusionNFT loss of one chunk at one noise draw. ``old_velocity`` None: the weights are
    still those the update started with and they are the sampling policy, so ``v_old`` is this
    forward's own output."""
    device = policy.device
    x0, t, _, x_t = _noised(chunk, key)
    x_t = x_t.to(device)
    prompts = [tr.prompt for tr in chunk]
    velocity = policy.velocity(x_t, t.to(device), policy.encode_prompts(prompts))
    if old_velocity is None:
        old_velocity = velocity.detach()
    ref_velocity = _ref_velocity(ref_policy, x_t, t.to(device), prompts, cfg)
    return diffusion_nft_loss(
        velocity,
        old_velocity,
        x_t,
        x0.to(device),
        t.to(device),
        nft_optimality(adv.to(device), cfg.adv_clip),
        cfg.nft_beta,
        ref_velocity,
        cfg.kl_beta,
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
