"""Seed rewards for the simulator, fitted to a measured eval: what exploring more seeds can find.

A shipped ``eval.json`` holds, per prompt, the rewards of a handful of seeds (8 on OCR-mini).
Resampling those values caps what exploration can find: the best group of G seeds among any
number of draws has at most half the gap between the prompt's lowest and highest measured
reward as its std, however many seeds are explored. Here every prompt gets a **beta-binomial**
distribution instead, fitted to its measured seeds:

- a reward is ``k / L`` with ``k`` in ``0..L`` (OCR-mini: L = 3 letters; ``L`` is read off the
  file's reward grid): each seed draws a quality ``q ~ Beta(a_p, b_p)``, then ``k ~
  Binomial(L, q)``. One seed's letters succeed or fail together as much as the measured seeds
  say (the shared overdispersion ``rho = 1 / (a_p + b_p + 1)``, pooled over prompts by the
  method of moments), so a prompt whose 8 seeds scored 0 still draws a legible seed now and then;
- the prompt's mean is its measured mean shrunk toward the population's by ``PRIOR_TRIALS``
  pseudo-trials (8 seeds say little about a rare success).

**Stale and fresh rewards.** Spotlight selects seeds on rewards sampled with weights one update
old; the rollout trains on what the fresh weights draw for the same seeds. Both come from one
Gaussian copula: seed ``i`` draws ``z1, z2 ~ N(0, 1)``; its stale reward is the prompt's
quantile at ``Phi(z1)`` and its fresh reward the quantile at ``Phi(r z1 + sqrt(1 - r^2) z2)``.
``r`` is calibrated (:func:`calibrate_latent`) so that the Spearman correlation of stale and
fresh rewards over a prompt's explored seeds, averaged as the exploration bench averages it,
equals the measured one (``LearningModel.rank_preservation``). Ties of the discrete rewards are
part of that figure, as they are of the measurement.

Draws are common random numbers: seed ``i`` of prompt ``p`` at iteration ``it`` has the same
stale and fresh reward in every simulated system. Pure: numpy and the standard library.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import random
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spotlight.seeds import spearman

PRIOR_TRIALS = 2.0
"""Pseudo-trials (of L letters each) of the population mean added to every prompt's mean."""
MAX_LEVELS = 24
"""Finest reward grid read off a file (a finer one is treated as continuous at this grid)."""
CALIBRATION_SEEDS = 32
"""Explored seeds per prompt in the Spearman calibration (the exploration bench explores 32)."""
CALIBRATION_PROMPTS = 256
"""Prompt draws in the calibration (cycling through the population)."""


@dataclass(frozen=True)
class PromptFit:
    """One prompt's beta-binomial: ``cdf[k]`` = P(reward <= k / levels)."""

    levels: int
    a: float
    b: float
    cdf: tuple[float, ...]

    @property
    def mean(self) -> float:
        return self.a / (self.a + self.b)

    def quantile(self, u: float) -> float:
        """The reward at cumulative probability ``u`` in (0, 1)."""
        for k, c in enumerate(self.cdf):
            if u <= c:
                return k / self.levels
        return 1.0


def reward_levels(per_prompt: list[list[float]]) -> int:
    """``L`` of the file's reward grid: the smallest gap between distinct rewards is 1 / L (1
    when all rewards are 0 or 1; at most ``MAX_LEVELS``)."""
    values = sorted({round(float(r), 9) for rs in per_prompt for r in rs})
    gaps = [b - a for a, b in itertools.pairwise(values) if b - a > 1e-9]
    if not gaps:
        return 1
    return max(1, min(MAX_LEVELS, round(1.0 / min(gaps))))


def _pmf(levels: int, a: float, b: float) -> list[float]:
    lb = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    out = []
    for k in range(levels + 1):
        log_c = math.lgamma(levels + 1) - math.lgamma(k + 1) - math.lgamma(levels - k + 1)
        lbk = math.lgamma(k + a) + math.lgamma(levels - k + b) - math.lgamma(levels + a + b)
        out.append(math.exp(log_c + lbk - lb))
    total = sum(out)
    return [p / total for p in out]


def fit_population(per_prompt: list[list[float]]) -> list[PromptFit]:
    """A beta-binomial per prompt (module docstring), sharing one overdispersion.

    Raises:
        ValueError: no prompts, a prompt without rewards, or rewards outside [0, 1].
    """
    if not per_prompt or any(len(rs) == 0 for rs in per_prompt):
        raise ValueError("fit_population needs at least one prompt, each with rewards")
    if any(not 0.0 <= r <= 1.0 for rs in per_prompt for r in rs):
        raise ValueError("rewards must lie in [0, 1]")
    L = reward_levels(per_prompt)
    counts = [[round(r * L) for r in rs] for rs in per_prompt]
    pooled = sum(sum(c) for c in counts) / (L * sum(len(c) for c in counts))
    pooled = min(max(pooled, 1e-3), 1 - 1e-3)
    means = [(sum(c) + PRIOR_TRIALS * L * pooled) / (L * (len(c) + PRIOR_TRIALS)) for c in counts]
    rho = 0.5  # one trial a seed (L = 1): a Bernoulli whatever rho is
    if L > 1:
        within = sum(statistics.variance(c) * len(c) for c in counts if len(c) > 1)
        binomial = sum(L * m * (1 - m) * len(c) for c, m in zip(counts, means, strict=True))
        ratio = within / binomial if binomial > 0 else 1.0
        rho = min(max((ratio - 1.0) / (L - 1), 1e-3), 0.999)
    scale = (1.0 - rho) / rho  # a + b
    fits = []
    for m in means:
        a, b = m * scale, (1.0 - m) * scale
        cdf = tuple(np.cumsum(_pmf(L, a, b)).tolist())
        fits.append(PromptFit(L, a, b, cdf))
    return fits


def _phi(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def _pair(fit: PromptFit, z1: float, z2: float, r: float) -> tuple[float, float]:
    u1 = min(max(_phi(z1), 1e-12), 1 - 1e-12)
    u2 = min(max(_phi(r * z1 + math.sqrt(max(0.0, 1.0 - r * r)) * z2), 1e-12), 1 - 1e-12)
    return fit.quantile(u1), fit.quantile(u2)


def mean_spearman(fits: list[PromptFit], r: float, seed: int = 0) -> float:
    """Mean stale/fresh Spearman over ``CALIBRATION_PROMPTS`` prompt draws of
    ``CALIBRATION_SEEDS`` seeds each at latent correlation ``r`` (constant sides skipped, as
    the bench skips them)."""
    rng = random.Random(f"calibrate/{seed}")
    rhos = []
    for j in range(CALIBRATION_PROMPTS):
        fit = fits[j % len(fits)]
        pairs = [_pair(fit, rng.gauss(0, 1), rng.gauss(0, 1), r) for _ in range(CALIBRATION_SEEDS)]
        rho = spearman([s for s, _ in pairs], [f for _, f in pairs])
        if not math.isnan(rho):
            rhos.append(rho)
    return statistics.fmean(rhos) if rhos else float("nan")


def calibrate_latent(fits: list[PromptFit], target: float, seed: int = 0) -> float:
    """The latent correlation whose stale/fresh Spearman (:func:`mean_spearman`) is ``target``
    (bisection; 1.0 when ``target`` is at or above what r = 1 gives)."""
    if target >= 0.999:
        return 1.0
    top = mean_spearman(fits, 1.0, seed)
    if math.isnan(top) or target >= top:
        return 1.0
    lo, hi = -1.0, 1.0
    for _ in range(12):  # to 5e-4: below the calibration's own noise (~0.01 in Spearman)
        mid = (lo + hi) / 2
        if mean_spearman(fits, mid, seed) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@functools.cache
def _fitted(path: str, rank_correlation: float) -> tuple[list, list[PromptFit], float]:
    """(measured rewards, fits, latent correlation) of an eval file: once per process, for
    every simulated system alike (the calibration takes about a second)."""
    doc = json.loads(Path(path).read_text())
    measured = [list(map(float, p["rewards"])) for p in doc["per_prompt"]]
    fits = fit_population(measured)
    return measured, fits, calibrate_latent(fits, rank_correlation)


class PopulationDraws:
    """What every seed-reward model of a prompt population offers the simulator: the prompts
    of an iteration and plain GRPO's expected contrast, from ``draw`` and ``prompts`` (the
    measured rewards per prompt) and ``seed``."""

    seed: int
    prompts: list[list[float]]

    def draw(self, it: int, prompt: int, n: int) -> list[float]:
        raise NotImplementedError

    def batch(self, it: int, size: int) -> list[int]:
        """The prompts (indices) of iteration ``it``: ``size`` of them, without repeats."""
        rng = random.Random(f"{self.seed}/batch/{it}")
        return rng.sample(range(len(self.prompts)), min(size, len(self.prompts)))

    def expected_random_std(self, group: int, draws: int = 4000) -> float:
        """Mean std of G random seeds' rewards over the population (plain GRPO's contrast)."""
        rng = random.Random(f"{self.seed}/baseline")
        stds = []
        for k in range(draws):
            p = rng.randrange(len(self.prompts))
            stds.append(statistics.pstdev(self.draw(-1 - k, p, group)))
        return statistics.fmean(stds)


class Rewards(PopulationDraws):
    """Seed rewards of a measured prompt population (a shipped ``eval.json``), drawn from its
    fitted beta-binomials (module docstring).

    Args:
        eval_file: an ``eval.json`` path, or the name of one shipped in ``EVALS``.
        seed: the simulation's seed (common random numbers across systems).
        rank_correlation: the measured stale/fresh Spearman of explored seeds.
        evals: the folder of shipped eval files.
    """

    def __init__(self, eval_file: str | Path, seed: int, rank_correlation: float, evals: Path):
        path = Path(eval_file)
        if not path.exists():
            path = evals / str(eval_file)
        self.measured, self.fits, self.latent = _fitted(str(path.resolve()), rank_correlation)
        self.seed = seed
        self.rank_correlation = rank_correlation

    @property
    def prompts(self) -> list[list[float]]:
        """The measured rewards per prompt."""
        return self.measured

    def _z(self, it: int, prompt: int, n: int) -> list[tuple[float, float]]:
        rng = random.Random(f"{self.seed}/{it}/{prompt}")
        return [(rng.gauss(0, 1), rng.gauss(0, 1)) for _ in range(n)]

    def draw(self, it: int, prompt: int, n: int) -> list[float]:
        """Fresh rewards of seeds ``0..n-1`` of ``prompt`` at iteration ``it``."""
        return self.draw_pair(it, prompt, n)[1]

    def draw_pair(self, it: int, prompt: int, n: int) -> tuple[list[float], list[float]]:
        """(stale, fresh) rewards of seeds ``0..n-1``: the same seeds on the weights before the
        last update and on the current ones."""
        fit = self.fits[prompt]
        pairs = [_pair(fit, z1, z2, self.latent) for z1, z2 in self._z(it, prompt, n)]
        return [s for s, _ in pairs], [f for _, f in pairs]
