"""``spotlight simulate``: the trace-driven cluster simulation of every system."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
from pathlib import Path

from spotlight import interrupts
from spotlight.cli.common import add_price_flags


def _simulate(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except interrupts.Interrupted as e:
        again = shlex.join(["spotlight", *(getattr(args, "argv", None) or ["simulate"])])
        e.line = (
            f"spotlight: interrupted ({e.name}); {args.out} is written only at the end, so"
            f" nothing new is there; rerun: {again}"
        )
        raise


def _run(args: argparse.Namespace) -> int:
    from spotlight.scheduling.costs import PriceTable
    from spotlight.sim.sim_report import simulate

    prices = PriceTable(
        on_demand_usd_per_gpu_h=args.on_demand_usd_per_gpu_h, spot_discount=args.spot_discount
    )
    learning = _learning_model(args, _fitted_exponent(args))
    simulate(
        _scenario(args),
        args.trace,
        Path(args.out),
        systems=args.systems,
        prices=prices,
        learning=learning,
        seed=args.seed,
        log=sys.stdout,
        trace_windows=args.trace_windows,
        workers=args.workers,
        ablation_windows=args.ablation_windows,
    )
    return 0


def _fitted_exponent(args: argparse.Namespace) -> float | None:
    """The exponent of --signal fitted from --fit-exploration's benches (None without them)."""
    if not args.fit_exploration:
        return None
    from spotlight.sim.sim_fit import SPEEDUPS, fit_exponent
    from spotlight.sim.sim_model import SIGNALS

    files = ", ".join(args.fit_exploration)
    summaries = [json.loads(Path(f).read_text()) for f in args.fit_exploration]
    for summary in summaries:
        for mode in args.fit_exclude or []:
            summary["modes"].pop(mode, None)
    fit = fit_exponent(summaries, args.signal, speedup=args.fit_by)
    if fit["k"] is None:
        raise ValueError(
            f"{files}: no mode both reached the target and changed {SIGNALS[args.signal]}, so"
            f" the {args.signal} exponent cannot be fitted from it"
        )
    k = fit["k"]
    what = SPEEDUPS[args.fit_by]
    for pt in fit["points"]:
        print(
            f"[simulate] fit: {pt['mode']}: {args.signal} x{pt['ratio']:.2f}, "
            f"{pt['speedup']:.2f}x {what} ({pt['reached']} reached)"
        )
    print(f"[simulate] fit: {args.signal} exponent k = {k:.3f} (from {files}, by {args.fit_by})")
    for name, summary in zip(args.fit_exploration, summaries, strict=True):
        _print_band(name, summary, args)
    return k


def _print_band(name: str, summary: dict, args: argparse.Namespace) -> None:
    """The exponent of one bench with its bootstrap interval over the bench's seeds."""
    from spotlight.sim.sim_fit import exponent_band

    try:
        band = exponent_band(summary, args.signal, speedup=args.fit_by)
    except ValueError as e:  # fewer than two seeds in every mode: no interval
        print(f"[simulate] fit: {name}: no interval over seeds ({e})")
        return
    if band["k"] is None or band["lo"] is None:
        print(f"[simulate] fit: {name}: k cannot be fitted on its paired seeds")
        return
    print(
        f"[simulate] fit: {name}: k = {band['k']:.3f} on its {len(band['seeds'])} paired seeds,"
        f" {band['level']:.0%} bootstrap interval over seeds [{band['lo']:.3f}, {band['hi']:.3f}]"
        f" ({band['unfitted_draws']} of {band['draws']} draws unfitted)"
    )


def _learning_model(args: argparse.Namespace, k: float | None):
    """The :class:`LearningModel` that the flags ask for, the flags checked."""
    from spotlight.sim.sim_model import LearningModel

    exponent = "live_exponent" if args.signal == "live_groups" else "contrast_exponent"
    changes = {
        "signal": args.signal,
        exponent: k if k is not None else args.exponent,
        "prompts_file": args.prompts_file,
        "rank_preservation": args.rank_correlation,
        "async_staleness_factor": args.async_staleness_factor,
        "reward_draws": args.reward_draws,
    }
    if args.reward_levels is not None:
        low, high = args.reward_levels
        if not 0.0 < low < high < 1.0:
            raise ValueError(f"--reward-levels needs 0 < FROM < TO < 1, got {low} {high}")
        changes.update(initial=low, target=high, follow_level=True)
    learning = LearningModel(
        baseline_iterations=args.baseline_iterations,
        **{k: v for k, v in changes.items() if v is not None},
    )
    if args.prompts_file is not None:
        from spotlight.sim.sim_model import EVALS

        if not (Path(args.prompts_file).exists() or (EVALS / args.prompts_file).exists()):
            shipped = ", ".join(sorted(p.name for p in EVALS.glob("eval-*.json")))
            raise ValueError(
                f"--prompts-file {args.prompts_file}: no such file (an eval.json of `spotlight"
                f" eval`, or a shipped one: {shipped})"
            )
    if args.rank_correlation is not None and not -1.0 <= args.rank_correlation <= 1.0:
        raise ValueError(f"--rank-correlation must be in [-1, 1], got {args.rank_correlation}")
    if args.async_staleness_factor is not None and not 0.0 < args.async_staleness_factor <= 1.0:
        raise ValueError(
            f"--async-staleness-factor must be in (0, 1], got {args.async_staleness_factor}"
        )
    return learning


def _scenario(args: argparse.Namespace):
    """--scenario's name, or the scenario with --explore-candidates / --explore-budget /
    --gpus-per-node."""
    if (
        args.explore_candidates is None
        and args.explore_budget is None
        and args.gpus_per_node is None
    ):
        return args.scenario
    from spotlight.sim.scenarios import SCENARIOS

    base = SCENARIOS[args.scenario]
    if args.explore_candidates is not None and args.explore_candidates < 2 * base.group_size:
        raise ValueError(f"--explore-candidates must be >= 2 x group size ({2 * base.group_size})")
    if args.explore_budget is not None and args.explore_budget < 0:
        raise ValueError(f"--explore-budget must be >= 0, got {args.explore_budget}")
    if args.gpus_per_node is not None and args.gpus_per_node < 1:
        raise ValueError(f"--gpus-per-node must be >= 1, got {args.gpus_per_node}")
    return dataclasses.replace(
        base,
        explore_candidates=args.explore_candidates or base.explore_candidates,
        explore_budget=base.explore_budget if args.explore_budget is None else args.explore_budget,
        gpus_per_node=args.gpus_per_node or base.gpus_per_node,
    )


def add_parser(sub) -> None:
    sim = sub.add_parser("simulate", help="trace-driven cluster simulation of every system")
    _add_run_flags(sim)
    _add_progress_flags(sim)
    _add_prompt_flags(sim)
    add_price_flags(sim)
    sim.set_defaults(func=_simulate)


def _add_run_flags(sim: argparse.ArgumentParser) -> None:
    """What is simulated: the scenario, the trace, the systems, and how many runs."""
    from spotlight.sim.scenarios import SCENARIOS
    from spotlight.sim.sim_model import SYSTEMS

    sim.add_argument("--scenario", default="paper-512", choices=sorted(SCENARIOS))
    sim.add_argument(
        "--trace",
        metavar="PATH",
        help="spot capacity trace (SkyPilot .json / Oobleck .csv; a bare name finds the shipped"
        " ones; default: the scenario's)",
    )
    sim.add_argument("--out", required=True, help="folder for summary.json, report.md, plots")
    sim.add_argument("--systems", nargs="+", choices=sorted(SYSTEMS), help="default: all")
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument(
        "--trace-windows",
        type=int,
        default=1,
        metavar="N",
        help="run each spot system from N evenly spaced starts of the trace; report the median"
        " window (Spotlight's) and every window's spread (default 1)",
    )
    sim.add_argument(
        "--gpus-per-node",
        type=int,
        metavar="N",
        help="GPUs of a spot node: what the trace counts and a preemption takes at once"
        " (default: the scenario's, 8 for paper-512/1280)",
    )
    sim.add_argument(
        "--ablation-windows",
        choices=("median", "all"),
        default="median",
        help="with --trace-windows: run the ablations (Spotlight with one part changed) on"
        " Spotlight's median window only (default), or on every window",
    )
    sim.add_argument(
        "--workers",
        type=int,
        default=min(2, os.cpu_count() or 1),
        metavar="N",
        help="simulations run in N processes at once; the results are those of one process"
        " (default: min(2, CPUs))",
    )


def _add_progress_flags(sim: argparse.ArgumentParser) -> None:
    """The learning model's progress: plain GRPO's iterations, the signal and its exponent."""
    from spotlight.sim.sim_fit import SPEEDUPS
    from spotlight.sim.sim_model import SIGNALS, LearningModel

    defaults = LearningModel()

    sim.add_argument(
        "--baseline-iterations",
        type=int,
        default=300,
        help="plain GRPO's iterations to the target (modelled; see spotlight/sim/sim_model.py)",
    )
    sim.add_argument(
        "--signal",
        choices=SIGNALS,
        default=defaults.signal,
        help="what an iteration's progress follows: 'live_groups' (progress = (share of live"
        " groups / plain GRPO's) ** k, the default) or 'contrast' (group reward std instead)",
    )
    sim.add_argument(
        "--exponent",
        type=float,
        default=None,
        metavar="K",
        help=f"k of --signal (defaults: live_groups {defaults.live_exponent:.3g}, fitted on the"
        f" OCR-mini exploration power bench; contrast {defaults.contrast_exponent:.3g}, on the"
        " graded-reward benches; docs/simulator.md)",
    )
    sim.add_argument(
        "--reward-levels",
        type=float,
        nargs=2,
        metavar=("FROM", "TO"),
        help="the run's reward goes from FROM to TO, and every iteration's seed rewards are"
        " drawn at the current level (the population shifted to that mean: dead groups as a"
        " saturating reward rises); default: the population's own level, not followed",
    )
    sim.add_argument(
        "--fit-exploration",
        metavar="JSON",
        nargs="+",
        help="fit --signal's k from these exploration.json files (spotlight bench"
        " exploration), pooling their points, and use it",
    )
    sim.add_argument(
        "--fit-exclude",
        metavar="MODE",
        nargs="+",
        help="modes of --fit-exploration's files left out of the fit",
    )
    sim.add_argument(
        "--fit-by",
        choices=SPEEDUPS,
        default="iterations",
        help="how --fit-exploration measures a mode's speed-up: 'iterations' (mean iterations"
        " to the target, the default) or 'slope' (mean validation gain per iteration, every"
        " validation of every run)",
    )


def _add_prompt_flags(sim: argparse.ArgumentParser) -> None:
    """The prompts and seeds: their population, exploration, reward draws, staleness."""
    from spotlight.sim.sim_model import LearningModel

    learn_defaults = LearningModel()
    sim.add_argument(
        "--prompts-file",
        metavar="JSON",
        help="prompt population: per-prompt rewards of an eval.json (`spotlight eval`) or a"
        f" shipped one (default {learn_defaults.prompts_file})",
    )
    sim.add_argument(
        "--rank-correlation",
        type=float,
        help="stale/fresh Spearman of explored seeds' rewards (default"
        f" {learn_defaults.rank_preservation}, measured on OCR-mini)",
    )
    sim.add_argument(
        "--explore-candidates",
        type=int,
        help="most seeds Spotlight explores per prompt (default: the scenario's, 2 x group)",
    )
    sim.add_argument(
        "--explore-budget",
        type=int,
        help="most seeds explored per iteration (default: what the update's time allows); below"
        " prompts x candidates, the planner chooses which prompts get them",
    )
    sim.add_argument(
        "--reward-draws",
        choices=["beta_binomial", "empirical"],
        help="seed rewards: a beta-binomial fit per prompt with stale/fresh draws at the rank"
        " correlation, or the measured values resampled (capped; default"
        f" {learn_defaults.reward_draws})",
    )
    sim.add_argument(
        "--async-staleness-factor",
        type=float,
        help="progress of a one-step-stale iteration relative to on-policy (async_one_step*,"
        " spotlight_pipelined and its ablations; default"
        f" {learn_defaults.async_staleness_factor}, measured on OCR-mini:"
        " docs/bench/staleness-ocr-mini.json)",
    )
