"""Seeded SDE sampling with per-step log-probs, resumable from a serialized trajectory state.

A (prompt, seed) pair fixes a trajectory: the seed seeds a per-sample CPU ``torch.Generator``
that draws the initial noise and then every step's noise, in order. Noise is drawn on the CPU
and moved to the model's device, so it does not depend on the device or on batch composition.
A trajectory can stop after any step, serialize to bytes (latents, step index, generator state,
weights version, the recorded path) and resume in another process.

Two Flow-GRPO-Fast options keep that contract (see :class:`SamplerConfig`):

* **SDE window.** Only the steps in ``sampler.sde_window`` are stochastic; the others are ODE
  (Euler) steps. Every step, ODE or SDE, draws one latent-sized noise tensor from the generator,
  in order (ODE steps discard it), so the generator's position after step k, and the noise a
  seed gives step k, do not depend on the window. ODE steps record a log-prob of 0.0 (a
  placeholder, not a density: the GRPO update trains only window steps).
* **Shared initial noise.** ``init_seed`` (optional) seeds the initial noise alone, in its own
  generator. The seed's generator still draws (and then discards) its own initial noise first,
  so its step noise is the same with or without an ``init_seed``, and ``init_seed == seed`` is
  the same trajectory as no ``init_seed``. A group sharing an ``init_seed`` shares ``xs[0]`` and
  differs only where its seeds' step noise enters: inside the SDE window.

So (prompt, seed, init_seed, sampler, weights) fix a trajectory bit for bit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import torch
from safetensors.torch import load, save

from spotlight.config import SamplerConfig
from spotlight.flow.sde import (
    StepParams,
    gaussian_log_prob,
    ode_step,
    sde_mean,
    sde_step,
    step_params,
    time_grid,
)
from spotlight.policies.base import Policy, TextCond


@dataclass
class Trajectory:
    """One image's denoising path, possibly unfinished."""

    prompt: str
    seed: int
    weights_version: int
    sampler: SamplerConfig
    step: int
    """Steps done so far (0 .. sampler.num_steps)."""
    latents: torch.Tensor
    """Current x at grid[step], float32 (C, H, W) on the CPU."""
    generator_state: torch.Tensor
    """State of the per-sample CPU generator (uint8)."""
    xs: list[torch.Tensor] = field(default_factory=list)
    """x at grid[0..step] (step + 1 tensors): what the GRPO update replays."""
    log_probs: list[float] = field(default_factory=list)
    """log p(x_{k+1} | x_k) for k < step, float32 per-element mean (Flow-GRPO); 0.0 for the ODE
    steps outside ``sampler.sde_window`` (a placeholder: they have no density)."""
    init_seed: int | None = None
    """Seed of the initial noise when it is shared (``sampler.group_init_noise``); None: the
    initial noise came from ``seed``'s generator."""

    @property
    def done(self) -> bool:
        return self.step >= self.sampler.num_steps

    def to_bytes(self) -> bytes:
        """Serialize (safetensors: tensors + JSON metadata; no pickle)."""
        tensors = {
            "latents": self.latents.contiguous(),
            "generator_state": self.generator_state.contiguous(),
            "xs": torch.stack(self.xs).contiguous(),
            "log_probs": torch.tensor(self.log_probs, dtype=torch.float64),
        }
        meta = {
            "prompt": self.prompt,
            "seed": self.seed,
            "init_seed": self.init_seed,
            "weights_version": self.weights_version,
            "step": self.step,
            "sampler": self.sampler.__dict__,
        }
        return save(tensors, metadata={"trajectory": json.dumps(meta)})

    @staticmethod
    def from_bytes(data: bytes) -> Trajectory:
        tensors = load(data)
        # safetensors' load() drops metadata; read the JSON header directly.
        header_len = int.from_bytes(data[:8], "little")
        meta = json.loads(json.loads(data[8 : 8 + header_len])["__metadata__"]["trajectory"])
        return Trajectory(
            prompt=meta["prompt"],
            seed=meta["seed"],
            weights_version=meta["weights_version"],
            sampler=SamplerConfig(**meta["sampler"]),
            step=meta["step"],
            latents=tensors["latents"],
            generator_state=tensors["generator_state"],
            xs=list(tensors["xs"].unbind(0)),
            log_probs=tensors["log_probs"].tolist(),
            init_seed=meta.get("init_seed"),
        )


def start_trajectory(
    prompt: str,
    seed: int,
    latent_shape: tuple[int, ...],
    sampler: SamplerConfig,
    weights_version: int = 0,
    init_seed: int | None = None,
) -> Trajectory:
    """Draw the initial noise x(t=1) from the seed, or from ``init_seed`` when given.

    The seed's generator draws its own initial noise either way (discarded when ``init_seed``
    is given), so the step noise that follows is the same with or without ``init_seed``.
    """
    sampler.validate()
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    if init_seed is not None and (not isinstance(init_seed, int) or init_seed < 0):
        raise ValueError(f"init_seed must be None or a non-negative int, got {init_seed!r}")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(latent_shape, generator=gen, dtype=torch.float32)
    if init_seed is not None:
        shared = torch.Generator(device="cpu").manual_seed(init_seed)
        x = torch.randn(latent_shape, generator=shared, dtype=torch.float32)
    return Trajectory(
        prompt=prompt,
        seed=seed,
        weights_version=weights_version,
        sampler=sampler,
        step=0,
        latents=x,
        generator_state=gen.get_state(),
        xs=[x.clone()],
        init_seed=init_seed,
    )


def guided_velocity(
    policy: Policy, x: torch.Tensor, t: torch.Tensor, cond: TextCond, guidance_scale: float
) -> torch.Tensor:
    """Velocity with classifier-free guidance: ``v_u + w (v_c - v_u)`` (plain ``v_c`` at w = 1)."""
    if guidance_scale == 1.0:
        return policy.velocity(x, t, cond)
    both = TextCond.cat([cond, policy.null_cond(x.shape[0])])
    v = policy.velocity(torch.cat([x, x]), torch.cat([t, t]), both)
    v_c, v_u = v.chunk(2)
    return v_u + guidance_scale * (v_c - v_u)


def step_log_prob(
    policy: Policy,
    x: torch.Tensor,
    x_next: torch.Tensor,
    params: list[StepParams],
    cond: TextCond,
    guidance_scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Recompute ``(log p(x_next | x), mean)`` under the policy's current weights (for GRPO)."""
    device = policy.device
    t = torch.tensor([p.t for p in params], dtype=torch.float32, device=device)
    v = guided_velocity(policy, x.to(device), t, cond, guidance_scale)
    means, log_probs = [], []
    for i, p in enumerate(params):
        mean = sde_mean(x[i : i + 1].to(device), v[i : i + 1], p)
        log_probs.append(gaussian_log_prob(x_next[i : i + 1].to(device), mean, p.std))
        means.append(mean)
    return torch.cat(log_probs), torch.cat(means)


def advance(
    policy: Policy,
    trajectories: list[Trajectory],
    num_steps: int | None = None,
    cond: TextCond | None = None,
) -> None:
    """Run up to ``num_steps`` more steps (default: to the end) on each trajectory, in place.

    Unfinished trajectories (possibly at different steps) share model forwards of exactly
    ``sampler.batch_size`` rows; the step math and the noise stay per sample. ``cond`` may hold
    precomputed prompt encodings, one row per trajectory.
    """
    if not trajectories:
        return
    settings = {(tr.sampler.batch_size, tr.sampler.guidance_scale) for tr in trajectories}
    if len(settings) != 1:
        raise ValueError(
            f"trajectories advanced together need one (batch_size, guidance_scale),"
            f" got {sorted(settings)}"
        )
    batch_size, _ = settings.pop()
    if cond is None:
        with torch.no_grad():
            cond = policy.encode_prompts([tr.prompt for tr in trajectories])
    gens = [torch.Generator(device="cpu") for _ in trajectories]
    for gen, tr in zip(gens, trajectories, strict=True):
        gen.set_state(tr.generator_state)
    budget = max(tr.sampler.num_steps for tr in trajectories) if num_steps is None else num_steps
    for _ in range(budget):
        live = [i for i, tr in enumerate(trajectories) if not tr.done]
        if not live:
            break
        for lo in range(0, len(live), batch_size):
            rows = live[lo : lo + batch_size]
            _one_step(
                policy,
                [trajectories[i] for i in rows],
                [gens[i] for i in rows],
                cond.index(rows),
                batch_size,
            )
    for gen, tr in zip(gens, trajectories, strict=True):
        tr.generator_state = gen.get_state()


def _one_step(
    policy: Policy,
    trs: list[Trajectory],
    gens: list[torch.Generator],
    cond: TextCond,
    batch_size: int,
) -> None:
    """One step for up to ``batch_size`` trajectories; the forward is padded to ``batch_size``.

    A step outside a trajectory's SDE window is an ODE step; it still draws its noise (unused).
    """
    params = [_step(tr) for tr in trs]
    pad = [0] * (batch_size - len(trs))  # padding rows repeat row 0; their output is dropped
    x = torch.stack([tr.latents for tr in trs] + [trs[0].latents for _ in pad]).to(policy.device)
    t = torch.tensor(
        [p.t for p in params] + [params[0].t for _ in pad],
        dtype=torch.float32,
        device=policy.device,
    )
    cond = cond.index(list(range(len(trs))) + pad)
    with torch.no_grad():
        v = guided_velocity(policy, x, t, cond, trs[0].sampler.guidance_scale).float().cpu()
    for i, (tr, gen, p) in enumerate(zip(trs, gens, params, strict=True)):
        noise = torch.randn(tr.latents.shape, generator=gen, dtype=torch.float32)
        if tr.sampler.is_sde_step(tr.step):
            x_next, log_prob = sde_step(tr.latents[None], v[i : i + 1], p, noise[None])
            lp = float(log_prob[0])
        else:  # deterministic: the noise drawn above is discarded (see the module docstring)
            x_next, lp = ode_step(tr.latents[None], v[i : i + 1], p.t, p.t_next), 0.0
        tr.latents = x_next[0]
        tr.xs.append(x_next[0].clone())
        tr.log_probs.append(lp)
        tr.step += 1


def _step(tr: Trajectory) -> StepParams:
    """The scalars of ``tr``'s next step (its sigma is only used inside the SDE window)."""
    return step_params(
        time_grid(tr.sampler.num_steps, tr.sampler.shift), tr.step, tr.sampler.sde_eta
    )


def sample(
    policy: Policy,
    prompts: list[str],
    seeds: list[int],
    sampler: SamplerConfig,
    weights_version: int = 0,
    init_seeds: list[int] | None = None,
) -> list[Trajectory]:
    """Sample one finished trajectory per (prompt, seed), with the initial noise of
    ``init_seeds[i]`` when given (one per sample; a group repeats its init seed)."""
    if len(prompts) != len(seeds):
        raise ValueError(f"{len(prompts)} prompts but {len(seeds)} seeds")
    if init_seeds is not None and len(init_seeds) != len(seeds):
        raise ValueError(f"{len(seeds)} seeds but {len(init_seeds)} init seeds")
    inits = init_seeds if init_seeds is not None else [None] * len(seeds)
    trajectories = [
        start_trajectory(p, s, policy.latent_shape, sampler, weights_version, init_seed=i)
        for p, s, i in zip(prompts, seeds, inits, strict=True)
    ]
    advance(policy, trajectories)
    return trajectories
