"""Paired statistics of ``spotlight bench exploration``: every arm against ``off``, seed by seed.

Each training seed runs every arm, so the arms compare within a seed (the same prompts, the same
validation, the same base) and the spread between seeds is resampled once for both sides:

* ``val_auc``: the mean validation reward over the run, the area under the validation curve
  (the initial validation included, trapezoids between validations) divided by the iterations
  it spans. It uses every validation, where the iterations to a target use one noisy crossing.
* ``iterations_to_target`` censored: a run that never reached the target counts at the
  iterations it ran, so a mean, and a ratio with ``off``'s mean above it, is a lower bound.
* intervals: a paired bootstrap over seeds, ``num_resamples`` draws of the common seeds with
  replacement; a statistic's 90% interval is the 5th to 95th percentile of its draws.

Nothing here imports Ray or torch; the bench's report calls it and tests call it directly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

NUM_RESAMPLES = 10_000
"""Bootstrap draws of the seeds."""
BOOTSTRAP_SEED = 0
"""The bootstrap's generator seed: a report is the same every time it is written."""
LEVEL = 0.90
"""The intervals' coverage."""
BASELINE = "off"
"""The arm every other arm is compared with."""
MIN_SEEDS_TO_DECIDE = 8
"""Paired seeds an arm needs before :func:`chosen_arm` may pick it."""


def val_auc(val_curve: Sequence[Sequence[float]]) -> float:
    """The mean validation reward over a run: ``sum of trapezoids / (last - first iteration)``
    over ``(iteration, wall_s, val_reward)`` points, the first the initial validation."""
    its = [float(p[0]) for p in val_curve]
    vals = [float(p[2]) for p in val_curve]
    if len(its) < 2 or its[-1] <= its[0]:
        raise ValueError("a validation curve needs two validations at different iterations")
    area = sum((its[i + 1] - its[i]) * (vals[i] + vals[i + 1]) / 2 for i in range(len(its) - 1))
    return area / (its[-1] - its[0])


def censored_iterations(run: dict[str, Any]) -> int:
    """A run's iterations to the target, or the iterations it validated up to when it never got
    there (a lower bound on what it would have taken)."""
    hit = run.get("iterations_to_target")
    return int(hit) if hit is not None else int(run["val_curve"][-1][0])


def binomial_se(p: float, n: int) -> float:
    """The standard error of a mean of ``n`` binary rewards at rate ``p``: ``sqrt(p (1 - p) /
    n)``. With fixed validation prompts and seeds it bounds the seed-sampling noise of one
    validation from above (a prompt's own rate varies less than the pooled one)."""
    return math.sqrt(max(p * (1 - p), 0.0) / n)


def paired_interval(
    arm: Sequence[float],
    base: Sequence[float],
    stat: Callable[[np.ndarray, np.ndarray], np.ndarray],
    num_resamples: int = NUM_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, float]:
    """``{mean, lo90, hi90}`` of ``stat(arm, base)`` (vectorized over a leading resample axis),
    ``arm[i]`` and ``base[i]`` from the same seed. ``mean`` is the statistic on the seeds
    themselves; the interval is the paired bootstrap's."""
    a, b = np.asarray(arm, dtype=float), np.asarray(base, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise ValueError("paired samples need the same number (>= 1) of seeds on both sides")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(a), size=(num_resamples, len(a)))
    draws = stat(a[idx], b[idx])
    tail = (1 - LEVEL) / 2 * 100
    lo, hi = np.percentile(draws, [tail, 100 - tail])
    return {
        "mean": float(stat(a[None, :], b[None, :])[0]),
        "lo90": float(lo),
        "hi90": float(hi),
    }


def mean_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Mean of ``a - b`` per resample (rows)."""
    return (a - b).mean(axis=-1)


def ratio_of_means(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``mean(b) / mean(a)`` per resample: how many times fewer iterations ``a`` needs than
    ``b`` (above 1: ``a`` is faster)."""
    return b.mean(axis=-1) / a.mean(axis=-1)


def paired_report(modes: dict[str, dict[str, Any]], baseline: str = BASELINE) -> dict[str, Any]:
    """Per arm other than ``baseline``, the seeds both ran and the paired statistics:
    ``val_auc_diff_vs_off``, ``iterations_to_target_ratio_vs_off`` (``{mean, lo90, hi90}``), and
    on how many seeds the arm was ahead (the keys say ``off`` whatever ``baseline`` is).
    ``modes``: the report's ``modes`` (each with ``runs`` holding ``seed``, ``val_auc`` and
    ``iterations_to_target_censored``)."""
    if baseline not in modes:
        return {}
    base = {r["seed"]: r for r in modes[baseline]["runs"]}
    out: dict[str, Any] = {}
    for mode, m in modes.items():
        if mode == baseline:
            continue
        runs = {r["seed"]: r for r in m["runs"]}
        seeds = sorted(set(runs) & set(base))
        if not seeds:
            continue
        auc = [runs[s]["val_auc"] for s in seeds]
        auc0 = [base[s]["val_auc"] for s in seeds]
        its = [runs[s]["iterations_to_target_censored"] for s in seeds]
        its0 = [base[s]["iterations_to_target_censored"] for s in seeds]
        out[mode] = {
            "paired_seeds": seeds,
            "val_auc_diff_vs_off": paired_interval(auc, auc0, mean_difference),
            "iterations_to_target_ratio_vs_off": paired_interval(its, its0, ratio_of_means),
            "val_auc_ahead_of_off_on": sum(x > y for x, y in zip(auc, auc0, strict=True)),
            "iterations_to_target_ahead_of_off_on": sum(
                x < y for x, y in zip(its, its0, strict=True)
            ),
        }
    return out


def chosen_arm(paired: dict[str, Any], min_seeds: int = MIN_SEEDS_TO_DECIDE) -> str | None:
    """The arm the defaults follow: among arms with ``min_seeds`` paired seeds whose AUC
    difference's 90% interval lies above zero, the one with the largest mean difference; None
    when no arm clears zero (exploration's benefit is then not shown)."""
    clear = {
        mode: p["val_auc_diff_vs_off"]["mean"]
        for mode, p in paired.items()
        if len(p["paired_seeds"]) >= min_seeds and p["val_auc_diff_vs_off"]["lo90"] > 0
    }
    return max(clear, key=lambda m: (clear[m], m)) if clear else None


BANDIT, UNIFORM = "spot", "spot_uniform"
"""The two planners of one budget: the paper's bandit (std gain) and the even split."""


def planner_report(
    modes: dict[str, dict[str, Any]], min_seeds: int = MIN_SEEDS_TO_DECIDE
) -> dict[str, Any] | None:
    """The bandit planner against the even split of the same budget, paired by seed:
    ``paired_seeds``, ``val_auc_diff_bandit_vs_uniform`` (``{mean, lo90, hi90}``) and
    ``bandit_beats_uniform``: True when that interval lies above zero on ``min_seeds`` seeds,
    False when those seeds show no such gain (the default planner is then the even split),
    None while fewer seeds pair. None when a report lacks either arm or a common seed."""
    if BANDIT not in modes or UNIFORM not in modes:
        return None
    paired = paired_report({UNIFORM: modes[UNIFORM], BANDIT: modes[BANDIT]}, baseline=UNIFORM)
    if BANDIT not in paired:
        return None
    got = paired[BANDIT]
    diff = got["val_auc_diff_vs_off"]
    enough = len(got["paired_seeds"]) >= min_seeds
    return {
        "paired_seeds": got["paired_seeds"],
        "val_auc_diff_bandit_vs_uniform": diff,
        "bandit_beats_uniform": diff["lo90"] > 0 if enough else None,
    }


def bandit_beats_uniform(
    modes: dict[str, dict[str, Any]], min_seeds: int = MIN_SEEDS_TO_DECIDE
) -> bool | None:
    """Whether the bandit planner earned its place as the default (:func:`planner_report`)."""
    report = planner_report(modes, min_seeds)
    return None if report is None else report["bandit_beats_uniform"]
