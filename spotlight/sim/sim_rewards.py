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
stale and fresh reward in every simulated system. They are counter-based: ``z1, z2`` of seed
``i`` come (Box-Muller) from two SplitMix64 hashes of ``(simulation seed, it, p, i)``, so any
set of seeds, prompts and iterations is drawn at once with numpy (:meth:`Rewards.pairs`), and a
seed's rewards do not depend on what else is drawn. A reward is read off in latent space: the
quantile at ``Phi(z)`` is the first ``k`` with ``z <= Phi^-1(cdf[k])`` (:func:`_thresholds`).
**Reward levels.** A run's reward moves (the paper's OCR runs from about 0.6 to above 0.9), and
with it which groups are dead. ``shift`` moves every latent value by the same amount, a probit
shift of each prompt's distribution: :meth:`Rewards.shift_for_level` finds the shift at which the
population's mean reward is a given level, and :meth:`Rewards.live_share` gives the expected
share of live groups (rewards not all equal) of G random seeds there, in closed form. The
stale/fresh calibration is made at the population's own level.
Pure: numpy, scipy's normal cdf and the standard library.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.special import ndtr

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


_MASK = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_CALIBRATION_TAG = 0x5EED_CA1B
_SIM_TAG = 0x5EED_D4A5
_CLAMP = 1e-12
"""The copula's uniforms are kept in [1e-12, 1 - 1e-12] (a cdf step closer to 0 or 1 is moot)."""


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's step and finalizer, elementwise on uint64 (wrapping)."""
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    return x ^ (x >> np.uint64(31))


def _words(values: Sequence[int] | np.ndarray | int) -> np.ndarray:
    """Integers (negative ones too) as uint64 words, two's complement."""
    a = np.asarray(values)
    if a.dtype == np.uint64:
        return a
    if a.dtype.kind in "iu":
        return a.astype(np.int64).astype(np.uint64)
    return np.asarray([int(v) & _MASK for v in np.ravel(a)], dtype=np.uint64).reshape(a.shape)


def _normal_pairs(keys: list[np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
    """(z1, z2), each (m, n) standard normal, independent: row j, column i from the hash of
    ``(keys[0][j], keys[1][j], ..., i)`` (every key a uint64 array of length m, or a scalar)."""
    h = np.zeros(1, dtype=np.uint64)
    for key in keys:
        h = _mix(h ^ np.atleast_1d(key))
    counter = (np.arange(n, dtype=np.uint64) * np.uint64(2))[None, :]
    base = h[:, None] ^ (h[:, None] >> np.uint64(17))
    w1 = _mix(base + counter)
    w2 = _mix(base + counter + np.uint64(1))
    u1 = ((w1 >> np.uint64(11)).astype(np.float64) + 1.0) * 2.0**-53  # (0, 1]
    theta = (w2 >> np.uint64(11)).astype(np.float64) * (2.0**-53 * 2.0 * math.pi)
    radius = np.sqrt(-2.0 * np.log(u1))
    return radius * np.cos(theta), radius * np.sin(theta)


@functools.cache
def _thresholds(fit: PromptFit) -> tuple[float, ...]:
    """Latent thresholds of ``fit.cdf``: reward ``k / L`` is the first ``k`` with ``z <= t[k]``
    (what :meth:`PromptFit.quantile` at ``Phi(z)``, clamped to [1e-12, 1 - 1e-12], gives)."""
    unit = statistics.NormalDist()
    out = []
    for c in fit.cdf:
        if c >= 1.0 - _CLAMP:
            out.append(math.inf)
        elif c < _CLAMP:
            out.append(-math.inf)
        else:
            out.append(unit.inv_cdf(c))
    return tuple(out)


def _threshold_table(fits: Sequence[PromptFit]) -> tuple[np.ndarray, np.ndarray]:
    """(thresholds (P, max L + 1), padded with +inf; levels (P,)) of ``fits``."""
    width = max(f.levels for f in fits) + 1
    table = np.full((len(fits), width), np.inf)
    for j, f in enumerate(fits):
        t = _thresholds(f)
        table[j, : len(t)] = t
    return table, np.asarray([f.levels for f in fits], dtype=np.int64)


def _quantize(table: np.ndarray, levels: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Rewards (m, n) of latent ``z`` (m, n), row j read off thresholds ``table[j]`` (m, W)."""
    k = (table[:, None, :] < z[:, :, None]).sum(axis=2)
    lv = levels[:, None]
    return np.minimum(k, lv) / lv


def _latent_pair(z1: np.ndarray, z2: np.ndarray, r: float) -> tuple[np.ndarray, np.ndarray]:
    """The copula's (stale, fresh) latent values: ``z1`` and ``r z1 + sqrt(1 - r^2) z2``."""
    return z1, r * z1 + math.sqrt(max(0.0, 1.0 - r * r)) * z2


def _row_spearman(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman rank correlation of every row of ``a`` and ``b`` (m, n), average ranks for
    ties (as :func:`spotlight.explore.seeds.spearman`); NaN where a row of either is constant."""

    def ranks(x: np.ndarray) -> np.ndarray:
        below = (x[:, None, :] < x[:, :, None]).sum(axis=2)
        ties = (x[:, None, :] == x[:, :, None]).sum(axis=2)
        return below + (ties - 1) / 2.0

    ra, rb = ranks(a), ranks(b)
    da = ra - ra.mean(axis=1, keepdims=True)
    db = rb - rb.mean(axis=1, keepdims=True)
    den = np.sqrt((da * da).sum(axis=1) * (db * db).sum(axis=1))
    constant = (a.min(axis=1) == a.max(axis=1)) | (b.min(axis=1) == b.max(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.clip((da * db).sum(axis=1) / den, -1.0, 1.0)
    return np.where(constant, np.nan, rho)


def mean_spearman(fits: list[PromptFit], r: float, seed: int = 0) -> float:
    """Mean stale/fresh Spearman over ``CALIBRATION_PROMPTS`` prompt draws of
    ``CALIBRATION_SEEDS`` seeds each at latent correlation ``r`` (constant sides skipped, as
    the bench skips them). The same latent draws for every ``r`` (common random numbers)."""
    rows = np.arange(CALIBRATION_PROMPTS)
    z1, z2 = _normal_pairs(
        [_words(_CALIBRATION_TAG), _words(seed), _words(rows)], CALIBRATION_SEEDS
    )
    table, levels = _threshold_table(fits)
    which = rows % len(fits)
    zs, zf = _latent_pair(z1, z2, r)
    stale = _quantize(table[which], levels[which], zs)
    fresh = _quantize(table[which], levels[which], zf)
    rhos = _row_spearman(stale, fresh)
    rhos = rhos[~np.isnan(rhos)]
    return float(rhos.mean()) if len(rhos) else float("nan")


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

    def _baseline_prompts(self, draws: int) -> list[int]:
        rng = random.Random(f"{self.seed}/baseline")
        return [rng.randrange(len(self.prompts)) for _ in range(draws)]

    def expected_random_std(self, group: int, draws: int = 4000) -> float:
        """Mean std of G random seeds' rewards over the population (plain GRPO's contrast):
        draw ``k`` is iteration ``-1 - k`` of a random prompt."""
        stds = [
            pstdev(self.draw(-1 - k, p, group)) for k, p in enumerate(self._baseline_prompts(draws))
        ]
        return statistics.fmean(stds)

    def live_share(self, group: int, shift: float = 0.0) -> float:
        """Expected share of live groups (rewards not all equal) of G random seeds over the
        population, from the same draws as :meth:`expected_random_std` (no level shift)."""
        if shift != 0.0:
            raise ValueError("these reward draws have no level shift (use the fitted draws)")
        cache = self.__dict__.setdefault("_live_shares", {})
        if group not in cache:
            prompts = self._baseline_prompts(4000)
            groups = [self.draw(-1 - k, p, group) for k, p in enumerate(prompts)]
            cache[group] = statistics.fmean(max(g) > min(g) for g in groups)
        return cache[group]


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
        self._population = (str(path.resolve()), rank_correlation)
        self.measured, self.fits, self.latent = _fitted(*self._population)
        self._table = _threshold_table(self.fits)
        self.seed = seed
        self.rank_correlation = rank_correlation

    @property
    def prompts(self) -> list[list[float]]:
        """The measured rewards per prompt."""
        return self.measured

    def pairs(
        self,
        its: Sequence[int] | np.ndarray,
        prompts: Sequence[int] | np.ndarray,
        n: int,
        shift: float = 0.0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(stale, fresh) rewards, each (m, n): row j holds seeds ``0..n-1`` of prompt
        ``prompts[j]`` at iteration ``its[j]``, all drawn at once (row j's values are those of
        :meth:`draw_pair` of that prompt and iteration), every latent value moved by ``shift``
        (:meth:`shift_for_level`; the same seeds' rewards at another reward level)."""
        p = np.asarray(prompts, dtype=np.int64)
        z1, z2 = _normal_pairs([_words(_SIM_TAG), _words(self.seed), _words(its), _words(p)], n)
        zs, zf = _latent_pair(z1, z2, self.latent)
        table, levels = self._table[0][p], self._table[1][p]
        stale = _quantize(table, levels, zs + shift)
        fresh = stale if self.latent == 1.0 else _quantize(table, levels, zf + shift)
        return stale, fresh

    def shift_for_level(self, level: float) -> float:
        """The latent shift at which the population's mean reward is ``level`` (interpolated on
        a grid of shifts; 0 at the population's own mean).

        Raises:
            ValueError: ``level`` is outside (0, 1).
        """
        if not 0.0 < level < 1.0:
            raise ValueError(f"a reward level must lie in (0, 1), got {level}")
        grid = _level_grid(self._population, self._table)
        return float(np.interp(level, grid.means, grid.shifts))

    def live_share(self, group: int, shift: float = 0.0) -> float:
        """Expected share of live groups (rewards not all equal) of ``group`` random seeds of a
        random prompt, at latent ``shift``: ``1 - mean_p sum_k P_p(k)^G``."""
        return float(1.0 - (_level_pmf(self._table, shift) ** group).sum(axis=1).mean())

    def draw(self, it: int, prompt: int, n: int) -> list[float]:
        """Fresh rewards of seeds ``0..n-1`` of ``prompt`` at iteration ``it``."""
        return self.draw_pair(it, prompt, n)[1]

    def draw_pair(self, it: int, prompt: int, n: int) -> tuple[list[float], list[float]]:
        """(stale, fresh) rewards of seeds ``0..n-1``: the same seeds on the weights before the
        last update and on the current ones."""
        stale, fresh = self.pairs([it], [prompt], n)
        return stale[0].tolist(), fresh[0].tolist()

    def expected_random_std(self, group: int, draws: int = 4000) -> float:
        """As :meth:`PopulationDraws.expected_random_std`, all draws at once (and once per
        process for a given population, seed and group)."""
        return _expected_random_std(self, group, draws)


def _level_pmf(tables: tuple[np.ndarray, np.ndarray], shift: float) -> np.ndarray:
    """(P, W + 1): P(reward = k / L_p) of every prompt at latent ``shift`` (columns past a
    prompt's ``L`` are 0): reward k is read where ``t[k - 1] < z + shift <= t[k]``."""
    table = tables[0]
    cdf = np.concatenate([np.zeros((len(table), 1)), ndtr(table - shift)], axis=1)
    cdf[:, -1] = 1.0
    return np.diff(cdf, axis=1)


def _mean_reward(tables: tuple[np.ndarray, np.ndarray], shift: float) -> float:
    pmf = _level_pmf(tables, shift)
    k = np.arange(pmf.shape[1])[None, :]
    return float((pmf * np.minimum(k, tables[1][:, None]) / tables[1][:, None]).sum(axis=1).mean())


@dataclass(frozen=True)
class _LevelGrid:
    shifts: np.ndarray
    means: np.ndarray
    """Population mean reward at each shift (increasing)."""


LEVEL_SHIFTS = np.linspace(-8.0, 8.0, 1601)
"""The shifts of :meth:`Rewards.shift_for_level`'s grid (a step of 0.01 in latent units)."""


def _level_grid(population: tuple[str, float], tables: tuple) -> _LevelGrid:
    """The population's mean reward on ``LEVEL_SHIFTS`` (once per process and population)."""
    if population not in _LEVEL_GRIDS:
        means = np.asarray([_mean_reward(tables, float(d)) for d in LEVEL_SHIFTS])
        _LEVEL_GRIDS[population] = _LevelGrid(LEVEL_SHIFTS, np.maximum.accumulate(means))
    return _LEVEL_GRIDS[population]


_LEVEL_GRIDS: dict[tuple[str, float], _LevelGrid] = {}


def _expected_random_std(r: Rewards, group: int, draws: int) -> float:
    key = (r._population, r.seed, group, draws)
    if key not in _BASELINE_STDS:
        ps = r._baseline_prompts(draws)
        fresh = r.pairs(-1 - np.arange(draws), ps, group)[1]
        _BASELINE_STDS[key] = float(fresh.std(axis=1).mean())
    return _BASELINE_STDS[key]


_BASELINE_STDS: dict[tuple, float] = {}
"""Plain GRPO's expected contrast per ((eval file, rank correlation), seed, group, draws)."""


def pstdev(xs: Sequence[float]) -> float:
    """Population standard deviation in plain float arithmetic (``statistics.pstdev`` is exact
    but slow on the simulator's many short lists)."""
    n = len(xs)
    if n == 0:
        raise ValueError("pstdev of no values")
    m = sum(xs) / n
    return math.sqrt(sum((x - m) * (x - m) for x in xs) / n)
