"""Flow-matching SDE math (Flow-GRPO style): time grid, one stochastic step, Gaussian log-probs.

Convention (as in diffusers' flow-matching schedulers): ``x_t = (1 - t) * x_0 + t * eps`` with
``t = 1`` pure noise and ``t = 0`` data; the model predicts the velocity ``v = eps - x_0``.
Sampling runs ``t`` from 1 down to 0. The deterministic ODE ``dx = v dt`` is turned into an SDE
with the same marginals:

    dx = [v + sigma_t^2 / (2 t) * (x + (1 - t) v)] dt + sigma_t dW
    sigma_t = eta * sqrt(t / (1 - t))

Outside a sampler's SDE window (Flow-GRPO-Fast) a step is the plain ODE (Euler) step
``x_next = x + v dt`` (:func:`ode_step`), which has no density and so no log-prob.

Pure tensor math, no model and no Ray: the sampler, the GRPO loss and the tests share it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@functools.lru_cache(maxsize=64)
def time_grid(num_steps: int, shift: float = 1.0) -> tuple[float, ...]:
    """Decreasing times ``t_0 = 1 > t_1 > ... > t_N = 0`` with the SD3 time shift.

    ``t' = shift * t / (1 + (shift - 1) * t)`` applied to ``linspace(1, 0, N + 1)``; shift > 1
    spends more steps at high noise. Python floats, so every process builds the identical grid;
    cached, since the sampler asks for it every step.
    """
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    if shift <= 0:
        raise ValueError(f"shift must be > 0, got {shift}")
    grid = []
    for i in range(num_steps + 1):
        t = 1.0 - i / num_steps
        grid.append(shift * t / (1.0 + (shift - 1.0) * t))
    return tuple(grid)


def sde_sigma(t: float, eta: float) -> float:
    """Diffusion coefficient ``sigma_t = eta * sqrt(t / (1 - t))``, defined for 0 < t < 1."""
    if not 0.0 < t < 1.0:
        raise ValueError(f"sde_sigma needs t in (0, 1), got t={t}")
    if eta < 0:
        raise ValueError(f"eta must be >= 0, got {eta}")
    return eta * math.sqrt(t / (1.0 - t))


def step_sigma(t: float, t_next: float, eta: float, t_sigma: float | None = None) -> float:
    """Standard deviation of one step's noise, ``sigma_t * sqrt(t - t_next)``.

    At t = 1 sigma_t is infinite; like Flow-GRPO we evaluate sigma there at ``t_sigma`` (the next
    grid point), so the first step stays finite.
    """
    t_eval = t if t_sigma is None else t_sigma
    return sde_sigma(t_eval, eta) * math.sqrt(t - t_next)


@dataclass(frozen=True)
class StepParams:
    """The scalars of one SDE step ``t -> t_next``."""

    t: float
    t_next: float
    sigma: float
    """sigma_t used in the drift (evaluated at t_sigma when t = 1)."""
    std: float
    """Standard deviation of the step's Gaussian: sigma * sqrt(t - t_next)."""


def step_params(grid: Sequence[float], index: int, eta: float) -> StepParams:
    """Scalars of step ``index`` of ``grid`` (``grid[index] -> grid[index + 1]``)."""
    if not 0 <= index < len(grid) - 1:
        raise ValueError(f"step index {index} outside [0, {len(grid) - 1})")
    t, t_next = grid[index], grid[index + 1]
    if not 0.0 < t <= 1.0 or not 0.0 <= t_next < t:
        raise ValueError(f"need 0 <= t_next < t <= 1, got t={t}, t_next={t_next}")
    t_sigma = grid[index + 1] if t >= 1.0 else t
    if t_sigma <= 0.0:  # a one-step grid 1 -> 0: no valid point to evaluate sigma at
        raise ValueError("a single step from t=1 to t=0 has no finite SDE sigma; use >= 2 steps")
    sigma = sde_sigma(t_sigma, eta)
    return StepParams(t=t, t_next=t_next, sigma=sigma, std=sigma * math.sqrt(t - t_next))


def sde_mean(sample: torch.Tensor, velocity: torch.Tensor, p: StepParams) -> torch.Tensor:
    """Mean of ``x_{t_next}`` given ``x_t`` and the predicted velocity.

    ``mean = x (1 + sigma^2 / (2 t) dt) + v (1 + sigma^2 (1 - t) / (2 t)) dt``, ``dt = t_next - t``.
    Computed in float32 whatever the inputs' dtype.
    """
    if sample.shape != velocity.shape:
        raise ValueError(
            f"sample {tuple(sample.shape)} and velocity {tuple(velocity.shape)} differ"
        )
    x = sample.float()
    v = velocity.float()
    dt = p.t_next - p.t
    s2 = p.sigma * p.sigma
    return x * (1.0 + s2 / (2.0 * p.t) * dt) + v * (1.0 + s2 * (1.0 - p.t) / (2.0 * p.t)) * dt


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, std: float) -> torch.Tensor:
    """Per-sample log-density of ``x ~ N(mean, std^2 I)``, averaged over elements, float32.

    ``log p = mean_i [ -(x_i - mu_i)^2 / (2 std^2) - log std - log sqrt(2 pi) ]``. The per-element
    mean (not the sum) follows Flow-GRPO, so ratios stay O(1) whatever the latent size.
    """
    if std <= 0:
        raise ValueError(f"std must be > 0, got {std}")
    diff = x.float() - mean.float()
    per_elem = -(diff * diff) / (2.0 * std * std) - math.log(std) - _LOG_SQRT_2PI
    return per_elem.flatten(1).mean(dim=1)


def sde_step(
    sample: torch.Tensor, velocity: torch.Tensor, p: StepParams, noise: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One stochastic step: returns ``(x_next, log_prob)`` with ``x_next = mean + std * noise``."""
    if noise.shape != sample.shape:
        raise ValueError(f"noise {tuple(noise.shape)} does not match sample {tuple(sample.shape)}")
    mean = sde_mean(sample, velocity, p)
    x_next = mean + p.std * noise.float()
    return x_next, gaussian_log_prob(x_next, mean, p.std)


def ode_step(sample: torch.Tensor, velocity: torch.Tensor, t: float, t_next: float) -> torch.Tensor:
    """One deterministic Euler step of ``dx = v dt``: ``x + v (t_next - t)``, float32."""
    if sample.shape != velocity.shape:
        raise ValueError(
            f"sample {tuple(sample.shape)} and velocity {tuple(velocity.shape)} differ"
        )
    if not 0.0 <= t_next < t <= 1.0:
        raise ValueError(f"need 0 <= t_next < t <= 1, got t={t}, t_next={t_next}")
    return sample.float() + velocity.float() * (t_next - t)
