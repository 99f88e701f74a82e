"""Fitting the simulator's learning model to measured exploration benches: the exponent of
:class:`spotlight.sim.sim_model.LearningModel`'s signal, from ``exploration.json`` files of
``spotlight bench exploration``, and a run's validation gain per iteration. Pure."""

from __future__ import annotations

import math
from typing import Any

from spotlight.sim.sim_model import SIGNALS

SPEEDUPS = {
    "iterations": "fewer iterations to the target",
    "slope": "the validation gain per iteration",
}
"""How :func:`fit_contrast_exponent` measures a mode's speed-up over the baseline, and what the
speed-up then reads as."""


def val_gain_per_iteration(val_curve: list) -> float | None:
    """A run's validation gain per iteration: the least-squares slope through the origin of
    ``val - initial`` on the iteration, over its validations (``val_curve``: ``(iteration,
    wall_s, val_reward)`` rows of ``spotlight bench exploration``, the first the initial one).
    Every validation counts, where the iterations to the target count one noisy crossing; None
    without a validation after the first."""
    initial = val_curve[0][2]
    pts = [(it, val - initial) for it, _, val in val_curve[1:] if it > 0]
    if not pts:
        return None
    return sum(it * gain for it, gain in pts) / sum(it * it for it, _ in pts)


def fit_exponent(
    summaries: dict[str, Any] | list[dict[str, Any]],
    signal: str = "live_groups",
    baseline_mode: str = "off",
    speedup: str = "iterations",
) -> dict[str, Any]:
    """Fit the exponent of :class:`LearningModel`'s ``signal`` from one or more
    ``exploration.json`` files (spotlight bench exploration).

    In each summary, each mode other than ``baseline_mode`` gives a point: its measured speed-up
    against its signal ratio over the baseline: ``mean group reward std`` (``"contrast"``) or
    the share of live groups, ``1 - zero_std_group_share`` (``"live_groups"``), of mode over
    baseline. The speed-up is, with ``speedup="iterations"``, ``mean iterations to target
    (baseline) / mean iterations to target (mode)``; with ``"slope"``, ``mean validation gain
    per iteration (mode) / (baseline)`` (:func:`val_gain_per_iteration`, every run, every
    validation: the rate the model itself describes, less noisy than one crossing of the
    target). A run that missed the target is left out of its mode's mean for ``"contrast"``; for
    ``"live_groups"`` it counts as the iterations it ran (a lower bound: a run too short to
    reach the target is the benches' common case where groups are dead). The model says
    ``speed-up = ratio ** k``; ``k`` is the least-squares slope through the origin of ``log
    speed-up`` on ``log ratio`` over the points of every summary. Returns ``{"k", "points",
    "baseline_iterations_to_target"}`` (the last: one per summary); ``k`` is None when no mode
    gives a usable point (the baseline never reached the target, or no ratio differs from 1).
    """
    if speedup not in SPEEDUPS:
        raise ValueError(f"speedup must be one of {tuple(SPEEDUPS)}, not {speedup!r}")
    if signal not in SIGNALS:
        raise ValueError(f"signal must be one of {tuple(SIGNALS)}, not {signal!r}")
    if isinstance(summaries, dict):
        summaries = [summaries]
    points, base_its = [], []
    for summary in summaries:
        pts, its = _signal_points(summary, signal, baseline_mode, speedup)
        points += pts
        base_its.append(its)
    usable = [p for p in points if abs(math.log(p["ratio"])) > 1e-9]
    k = None
    if usable:
        sxx = sum(math.log(p["ratio"]) ** 2 for p in usable)
        sxy = sum(math.log(p["ratio"]) * math.log(p["speedup"]) for p in usable)
        k = sxy / sxx
    return {
        "k": k,
        "points": points,
        "baseline_iterations_to_target": base_its[0] if len(base_its) == 1 else base_its,
    }


def fit_contrast_exponent(
    summaries: dict[str, Any] | list[dict[str, Any]],
    baseline_mode: str = "off",
    speedup: str = "iterations",
) -> dict[str, Any]:
    """:func:`fit_exponent` of the ``"contrast"`` signal (points keep ``contrast_ratio``)."""
    fit = fit_exponent(summaries, "contrast", baseline_mode, speedup)
    for point in fit["points"]:
        point["contrast_ratio"] = point["ratio"]
    return fit


def _run_iterations(run: dict[str, Any], censored: bool) -> float | None:
    """A run's iterations to the target; a run that missed it: None, or with ``censored`` the
    last iteration it validated (its ``val_curve``)."""
    its = run["iterations_to_target"]
    if its is None and censored and run.get("val_curve"):
        return run["val_curve"][-1][0]
    return its


def _signal_points(
    summary: dict[str, Any], signal: str, baseline_mode: str, speedup: str
) -> tuple[list, float | None]:
    """One summary's (signal ratio, speed-up) points and its baseline's mean iterations."""
    modes = summary["modes"]
    if baseline_mode not in modes:
        raise ValueError(f"exploration summary has no {baseline_mode!r} mode: {sorted(modes)}")
    censored = signal == "live_groups"

    def mean(xs) -> float | None:
        xs = [x for x in xs if x is not None]
        return sum(xs) / len(xs) if xs else None

    def mean_iterations(mode: dict[str, Any]) -> float | None:
        return mean(_run_iterations(r, censored) for r in mode["runs"])

    def mean_slope(mode: dict[str, Any]) -> float | None:
        return mean(val_gain_per_iteration(r["val_curve"]) for r in mode["runs"])

    def level(mode: dict[str, Any]) -> float:
        if signal == "contrast":
            return mode["group_reward_std_mean"]
        return 1.0 - mode["zero_std_group_share"]

    base = modes[baseline_mode]
    base_its = mean_iterations(base)
    base_slope = mean_slope(base) if speedup == "slope" else None
    points = []
    for name, mode in modes.items():
        its = mean_iterations(mode)
        if name == baseline_mode or its is None or base_its is None:
            continue
        if speedup == "slope":
            slope = mean_slope(mode)
            if slope is None or slope <= 0 or base_slope is None or base_slope <= 0:
                continue
            gain = slope / base_slope
        else:
            gain = base_its / its
        points.append(
            {
                "mode": name,
                "ratio": level(mode) / level(base),
                "speedup": gain,
                "reached": mode["reached_target"],
            }
        )
    return points, base_its


def exponent_band(
    summary: dict[str, Any],
    signal: str = "live_groups",
    baseline_mode: str = "off",
    speedup: str = "iterations",
    num_resamples: int = 2_000,
    seed: int = 0,
    level: float = 0.90,
) -> dict[str, Any]:
    """:func:`fit_exponent`'s ``k`` on the training seeds every mode ran, with a bootstrap
    interval over those seeds: each draw resamples the seeds (the same ones for every mode, so
    the comparison stays paired), recomputes each mode's mean signal and iterations from its
    runs of those seeds, and refits ``k``. Draws in which ``k`` cannot be fitted (no mode
    changed the signal) are left out and counted. Returns ``{"k", "lo", "hi", "level",
    "seeds", "draws", "unfitted_draws"}``; ``lo``/``hi`` are None when no draw fits.

    Raises:
        ValueError: fewer than two seeds are shared by every mode, or the runs lack the fields
            read (an older bench's report).
    """
    import numpy as np

    need = ("seed", "zero_std_group_share", "group_reward_std_mean", "iterations_to_target")
    need += ("val_curve",) if speedup == "slope" else ()
    for name, mode in summary["modes"].items():
        missing = sorted({k for r in mode["runs"] for k in need if k not in r})
        if missing:
            raise ValueError(f"the runs of mode {name!r} carry no {', '.join(missing)}")
    by_seed = {
        name: {int(r["seed"]): r for r in mode["runs"]} for name, mode in summary["modes"].items()
    }
    seeds = sorted(set.intersection(*(set(runs) for runs in by_seed.values())))
    if len(seeds) < 2:
        raise ValueError(f"a band needs >= 2 seeds run by every mode, got {seeds}")

    def fit(pick) -> float | None:
        modes = {name: _mode_of([runs[s] for s in pick]) for name, runs in by_seed.items()}
        return fit_exponent({"modes": modes}, signal, baseline_mode, speedup)["k"]

    rng = np.random.default_rng(seed)
    ks = [fit(rng.choice(seeds, size=len(seeds))) for _ in range(num_resamples)]
    fitted = [k for k in ks if k is not None]
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(fitted, [tail, 100 - tail]) if fitted else (None, None)
    return {
        "k": fit(seeds),
        "lo": None if lo is None else float(lo),
        "hi": None if hi is None else float(hi),
        "level": level,
        "seeds": seeds,
        "draws": num_resamples,
        "unfitted_draws": num_resamples - len(fitted),
    }


def _mode_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A mode's entry of an ``exploration.json`` made of ``runs`` (what the fit reads)."""

    def mean(key: str) -> float | None:  # as the bench's report: runs without the figure skipped
        xs = [r[key] for r in runs if r[key] is not None]
        return sum(xs) / len(xs) if xs else None

    return {
        "runs": runs,
        "group_reward_std_mean": mean("group_reward_std_mean"),
        "zero_std_group_share": mean("zero_std_group_share"),
        "reached_target": f"{sum(r['iterations_to_target'] is not None for r in runs)}/{len(runs)}",
    }
