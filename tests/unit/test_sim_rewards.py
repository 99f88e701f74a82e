"""The simulator's seed rewards: beta-binomial fits per prompt, stale/fresh draws by a copula."""

from __future__ import annotations

import json
import math
import random
import statistics

import numpy as np
import pytest

from spotlight.explore.seeds import max_variance_subset
from spotlight.sim.sim_model import EVALS
from spotlight.sim.sim_rewards import (
    PromptFit,
    Rewards,
    _pmf,
    calibrate_latent,
    fit_population,
    mean_spearman,
    reward_levels,
)


def test_the_reward_grid_is_read_off_the_file():
    assert reward_levels([[0.0, 1 / 3, 2 / 3], [1.0, 0.0]]) == 3
    assert reward_levels([[0.0, 1.0], [1.0]]) == 1
    assert reward_levels([[0.0, 0.0]]) == 1
    assert reward_levels([[0.0, 0.25, 0.5]]) == 4


def test_the_pmf_is_a_distribution_with_the_beta_mean():
    pmf = _pmf(3, 2.0, 6.0)
    assert sum(pmf) == pytest.approx(1.0)
    assert sum(k * p for k, p in enumerate(pmf)) / 3 == pytest.approx(2.0 / 8.0)


def _synthetic(prompts: int, seeds: int, levels: int, scale: float, rng) -> list[list[float]]:
    """Prompts with means spread over (0, 1), each seed a beta-binomial draw of a + b = scale."""
    out = []
    for _ in range(prompts):
        m = rng.uniform(0.1, 0.9)
        qs = rng.beta(m * scale, (1 - m) * scale, size=seeds)
        out.append([float(k) / levels for k in rng.binomial(levels, qs)])
    return out


def test_the_fit_recovers_a_known_overdispersion_and_the_means():
    rng = np.random.default_rng(0)
    for scale in (1.0, 20.0):  # letters of a seed strongly tied, and nearly independent
        population = _synthetic(800, 8, 3, scale, rng)
        fits = fit_population(population)
        rho = 1 / (fits[0].a + fits[0].b + 1)
        assert rho == pytest.approx(1 / (scale + 1), abs=0.05)
        measured = statistics.fmean(statistics.fmean(p) for p in population)
        assert statistics.fmean(f.mean for f in fits) == pytest.approx(measured, abs=0.01)


def test_the_fit_refuses_what_it_cannot_fit():
    with pytest.raises(ValueError, match="at least one prompt"):
        fit_population([])
    with pytest.raises(ValueError, match="at least one prompt"):
        fit_population([[0.5], []])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        fit_population([[0.5, 1.5]])


def test_a_prompt_that_never_succeeded_still_draws_rare_successes():
    population = [[0.0] * 7 + [1 / 3]] + [[0.0, 1 / 3, 2 / 3, 1.0] * 2] * 20
    fit = fit_population(population)[0]
    assert fit.quantile(1 - 1e-9) >= 2 / 3  # measured best: 1/3; resampling could not pass it
    assert 1.0 - fit.cdf[1] > 1e-3  # P(reward >= 2/3) is small but not zero
    assert fit.quantile(1e-9) == 0.0


def _population_file(tmp_path, seed=0):
    rng = np.random.default_rng(seed)
    doc = {"per_prompt": [{"rewards": r} for r in _synthetic(64, 8, 3, 3.0, rng)]}
    path = tmp_path / "eval.json"
    path.write_text(json.dumps(doc))
    return path


def test_stale_and_fresh_draws_have_the_measured_rank_correlation(tmp_path):
    path = _population_file(tmp_path)
    for target in (0.3, 0.7):
        r = Rewards(path, seed=0, rank_correlation=target, evals=EVALS)
        assert 0.0 < r.latent < 1.0
        assert mean_spearman(r.fits, r.latent, seed=7) == pytest.approx(target, abs=0.04)
    same = Rewards(path, seed=0, rank_correlation=1.0, evals=EVALS)
    stale, fresh = same.draw_pair(3, 5, 64)
    assert stale == fresh and same.latent == 1.0


def test_draws_are_common_random_numbers_and_seed_prefixes_agree(tmp_path):
    path = _population_file(tmp_path)
    a = Rewards(path, seed=4, rank_correlation=0.7, evals=EVALS)
    b = Rewards(path, seed=4, rank_correlation=0.7, evals=EVALS)
    assert a.draw_pair(2, 9, 32) == b.draw_pair(2, 9, 32)
    assert a.draw(2, 9, 32)[:8] == a.draw(2, 9, 8)  # seed i's reward: whatever else is drawn
    assert a.draw(2, 9, 8) != a.draw(3, 9, 8) or a.draw(2, 9, 8) != a.draw(2, 10, 8)
    assert all(0.0 <= x <= 1.0 and math.isclose(x * 3, round(x * 3)) for x in a.draw(1, 1, 50))


def test_exploring_more_seeds_finds_more_contrast_than_resampling_allowed():
    """On the shipped OCR-mini population, the fresh std of the max-variance 8 of 32 seeds
    passes what resampling the 8 measured values can ever give (half the measured range)."""
    r = Rewards("eval-ocr-mini-v0.json", seed=0, rank_correlation=1.0, evals=EVALS)
    picked, cap = [], []
    for p in range(len(r.fits)):
        fresh = r.draw(0, p, 32)
        picked.append(statistics.pstdev([fresh[i] for i in max_variance_subset(fresh, 8)]))
        cap.append((max(r.measured[p]) - min(r.measured[p])) / 2)
    assert statistics.fmean(picked) > 1.1 * statistics.fmean(cap)


def test_calibration_at_the_top_and_the_quantiles_edges():
    fits = [PromptFit(1, 1.0, 1.0, (0.5, 1.0))] * 4
    assert calibrate_latent(fits, 0.9999) == 1.0
    assert fits[0].quantile(0.5) == 0.0 and fits[0].quantile(0.51) == 1.0
    rng = random.Random(0)
    assert -1.0 <= calibrate_latent(fits, rng.uniform(0.1, 0.5)) <= 1.0


def test_batched_draws_are_the_one_prompt_draws(tmp_path):
    from spotlight.sim.sim_rewards import PopulationDraws

    r = Rewards(_population_file(tmp_path), seed=2, rank_correlation=0.6, evals=EVALS)
    its, prompts = [0, 5, -3, 5, 7], [1, 9, 4, 9, 0]
    stale, fresh = r.pairs(its, prompts, 24)
    for row, (it, p) in enumerate(zip(its, prompts, strict=True)):
        assert (stale[row].tolist(), fresh[row].tolist()) == r.draw_pair(it, p, 24)
    assert stale[1].tolist() == stale[3].tolist()  # the same prompt and iteration
    assert Rewards(_population_file(tmp_path), 3, 0.6, EVALS).draw(0, 1, 24) != r.draw(0, 1, 24)
    # all at once, as one at a time (the generic mean of per-draw stds)
    assert r.expected_random_std(4, draws=300) == pytest.approx(
        PopulationDraws.expected_random_std(r, 4, draws=300), abs=1e-12
    )


def test_rewards_read_in_latent_space_are_the_quantiles_of_phi():
    from spotlight.sim.sim_rewards import _quantize, _threshold_table

    fits = fit_population([[0.0] * 7 + [1 / 3]] + [[0.0, 1 / 3, 2 / 3, 1.0] * 2] * 5)
    z = np.random.default_rng(3).normal(scale=2.5, size=(len(fits), 400))
    table, levels = _threshold_table(fits)
    got = _quantize(table, levels, z)
    for j, fit in enumerate(fits):
        for i in range(z.shape[1]):
            u = min(max(statistics.NormalDist().cdf(z[j, i]), 1e-12), 1 - 1e-12)
            assert got[j, i] == fit.quantile(u)


def test_the_calibrations_spearman_per_row_is_the_seed_modules():
    from spotlight.explore.seeds import spearman
    from spotlight.sim.sim_rewards import _row_spearman

    rng = np.random.default_rng(4)
    a, b = rng.integers(0, 4, (200, 32)) / 3, rng.integers(0, 4, (200, 32)) / 3
    a[0], b[1] = 0.0, 1.0  # constant sides: NaN
    got = _row_spearman(a, b)
    want = np.array([spearman(x, y) for x, y in zip(a, b, strict=True)])
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(got[:2]).all()
    assert np.allclose(got[2:], want[2:], atol=1e-12)


def _binary_file(tmp_path, successes: list[int], seeds: int = 8):
    per_prompt = [{"rewards": [1.0] * k + [0.0] * (seeds - k)} for k in successes]
    path = tmp_path / "binary.json"
    path.write_text(json.dumps({"per_prompt": per_prompt}))
    return path


def test_a_level_shift_moves_the_population_mean_and_its_dead_groups(tmp_path):
    # Binary rewards: at shift d a prompt succeeds with Phi(d - t_p), its threshold t_p.
    r = Rewards(_binary_file(tmp_path, [0, 1, 2, 4, 6]), seed=0, rank_correlation=1.0, evals=EVALS)
    own = float(np.mean([f.mean for f in r.fits]))
    assert r.shift_for_level(own) == pytest.approx(0.0, abs=0.01)
    p = np.asarray([f.mean for f in r.fits])
    # closed form at the population's own level: 1 - mean(p^G + (1 - p)^G)
    assert r.live_share(8) == pytest.approx(float(1 - np.mean(p**8 + (1 - p) ** 8)), rel=1e-6)
    high = r.shift_for_level(0.9)
    assert high > 0 and r.shift_for_level(0.1) < 0
    _, fresh = r.pairs(np.arange(4000), np.arange(4000) % 5, 8, high)
    assert fresh.mean() == pytest.approx(0.9, abs=0.01)
    # the drawn groups die as the closed form says, and from the top: all-correct
    dead = fresh.min(axis=1) == fresh.max(axis=1)
    assert 1 - dead.mean() == pytest.approx(r.live_share(8, high), abs=0.02)
    assert (fresh[dead] == 1.0).mean() > 0.9
    # saturating (0.9) kills more groups than the middle (0.5); unshifted draws are the old ones
    assert r.live_share(8, high) < r.live_share(8, r.shift_for_level(0.5))
    assert np.array_equal(r.pairs([3], [2], 16)[1], r.pairs([3], [2], 16, 0.0)[1])
    with pytest.raises(ValueError, match=r"in \(0, 1\)"):
        r.shift_for_level(1.0)


def test_graded_populations_shift_every_level_together():
    r = Rewards("eval-ocr-mini-v0.json", seed=0, rank_correlation=0.67, evals=EVALS)
    for level in (0.3, 0.6, 0.9):
        d = r.shift_for_level(level)
        fresh = r.pairs(np.arange(3000), np.arange(3000) % len(r.prompts), 16, d)[1]
        assert fresh.mean() == pytest.approx(level, abs=0.015)
        assert set(np.unique(fresh * 3).round(6)) <= {0.0, 1.0, 2.0, 3.0}
