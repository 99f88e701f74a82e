"""SDE math: time grid, sigma, the step's mean and log-prob against independent float64 maths."""

import itertools
import math

import pytest
import torch

from spotlight.flow.sde import (
    gaussian_log_prob,
    sde_mean,
    sde_sigma,
    sde_step,
    step_params,
    time_grid,
)


def normal_log_prob_f64(x, mean, std):
    """Independent reference: torch.distributions in float64, averaged over elements."""
    dist = torch.distributions.Normal(mean.double(), torch.tensor(std, dtype=torch.float64))
    return dist.log_prob(x.double()).flatten(1).mean(1)


def test_gaussian_log_prob_matches_float64_reference():
    g = torch.Generator().manual_seed(0)
    for std in (1e-3, 0.05, 0.7, 3.0):
        mean = torch.randn(4, 1, 8, 16, generator=g)
        x = mean + std * torch.randn(4, 1, 8, 16, generator=g) * 1.7
        got = gaussian_log_prob(x, mean, std)
        assert got.dtype == torch.float32
        torch.testing.assert_close(
            got.double(), normal_log_prob_f64(x, mean, std), rtol=1e-5, atol=1e-5
        )


def test_step_log_prob_matches_float64_recomputation():
    """sde_step's log-prob equals a float64 Gaussian around an independently computed mean."""
    g = torch.Generator().manual_seed(1)
    grid = time_grid(10, shift=3.0)
    eta = 0.7
    for k in range(10):
        p = step_params(grid, k, eta)
        x, v, noise = (torch.randn(3, 2, 4, 4, generator=g) for _ in range(3))
        x_next, log_prob = sde_step(x, v, p, noise)
        # float64 mean from the SDE's drift written out again: x + [v + s^2/(2t)(x + (1-t)v)] dt
        t, dt, s = p.t, p.t_next - p.t, p.sigma
        x64, v64 = x.double(), v.double()
        mean64 = x64 + (v64 + s * s / (2 * t) * (x64 + (1 - t) * v64)) * dt
        torch.testing.assert_close(
            x_next.double(), mean64 + p.std * noise.double(), rtol=1e-5, atol=1e-5
        )
        torch.testing.assert_close(
            log_prob.double(), normal_log_prob_f64(x_next, mean64, p.std), rtol=1e-5, atol=1e-5
        )


def test_sigma_formula_and_domain():
    assert sde_sigma(0.5, 0.7) == pytest.approx(0.7)
    assert sde_sigma(0.2, 1.0) == pytest.approx(math.sqrt(0.25))
    for bad in (0.0, 1.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"t in \(0, 1\)"):
            sde_sigma(bad, 0.7)


def test_time_grid_and_first_step():
    grid = time_grid(8, shift=3.0)
    assert grid[0] == 1.0 and grid[-1] == 0.0 and len(grid) == 9
    assert all(a > b for a, b in itertools.pairwise(grid))
    assert grid[4] > 0.5  # shift > 1 spends more steps at high noise
    p0 = step_params(grid, 0, 0.7)
    assert p0.sigma == pytest.approx(sde_sigma(grid[1], 0.7))  # finite at t = 1
    with pytest.raises(ValueError, match="single step"):
        step_params(time_grid(1), 0, 0.7)
    with pytest.raises(ValueError, match="outside"):
        step_params(grid, 8, 0.7)
    with pytest.raises(ValueError):
        time_grid(0)


def test_shape_mismatch_is_named():
    p = step_params(time_grid(4), 1, 0.5)
    with pytest.raises(ValueError, match="velocity"):
        sde_mean(torch.zeros(2, 1, 4, 4), torch.zeros(2, 1, 4, 5), p)
    with pytest.raises(ValueError, match="noise"):
        sde_step(torch.zeros(2, 1, 4, 4), torch.zeros(2, 1, 4, 4), p, torch.zeros(1, 1, 4, 4))


def test_sde_with_exact_velocity_has_the_flow_marginals():
    """For a point mass x0 the exact velocity is (x - x0) / t; the SDE must keep
    x_t ~ N((1 - t) x0, t^2) at every grid point and land on x0."""
    g = torch.Generator().manual_seed(2)
    n, x0 = 20000, 0.6
    grid = time_grid(200)
    x = torch.randn(1, n, generator=g)
    for k in range(200):
        p = step_params(grid, k, eta=0.8)
        x, _ = sde_step(x, (x - x0) / p.t, p, torch.randn(1, n, generator=g))
        if k + 1 == 100:  # t = 0.5
            t = grid[k + 1]
            assert float(x.mean()) == pytest.approx((1 - t) * x0, abs=0.02)
            assert float(x.std()) == pytest.approx(t, rel=0.03)
    assert float((x - x0).abs().max()) < 0.03
