"""``spotlight bench``: benchmarks that need real runs (``exploration``, ``regroup``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from spotlight import interrupts
from spotlight.bench_jobs import RunFailed
from spotlight.config import Config
from spotlight.overrides import apply_overrides
from spotlight.recipes import DEFAULT_RECIPE, RECIPES, get_recipe


def _bench(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except interrupts.Interrupted as e:
        e.line = interrupted_line(e.name, args)
        raise
    except RunFailed as e:
        print(f"spotlight: {e}", file=sys.stderr)
        return 1


def interrupted_line(signal_name: str, args: argparse.Namespace) -> str:
    """The one line an interrupted ``spotlight bench`` prints: what it keeps and its rerun."""
    again = shlex.join(["spotlight", *(getattr(args, "argv", None) or ["bench"])])
    if args.what == "regroup":
        return f"spotlight: interrupted ({signal_name}); nothing kept; rerun: {again}"
    runs = Path(args.out) / "runs"
    done = sorted(p.parent.name for p in runs.glob("*/summary.json"))
    return (
        f"spotlight: interrupted ({signal_name}); {len(done)} finished run(s) kept in {runs}"
        f" (an unfinished one resumes from its checkpoint); rerun to go on: {again}"
    )


def _run(args: argparse.Namespace) -> int:
    if args.what == "regroup":
        from spotlight.sp.bench_regroup import run

        run(Path(args.out), args.repeats, args.checkpoint_mb, log=sys.stdout)
        return 0
    return _exploration(args)


def _exploration(args: argparse.Namespace) -> int:
    from spotlight.bench import MODES, finished_runs, report_records, run_configs, run_runs

    cfg = _exploration_config(args)
    modes = args.modes or list(MODES)
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown mode(s) {unknown}; known: {', '.join(MODES)}")
    if args.jobs < 1 or (args.jobs > 1 and args.runner != "local"):
        raise ValueError(
            f"--jobs {args.jobs}: runs at once must be >= 1, and more than 1 needs --runner local"
            " (the Ray job shares one cluster)"
        )
    out = Path(args.out)
    name = args.name or "exploration"
    out.mkdir(parents=True, exist_ok=True)
    reuse = None
    if args.reuse and Path(args.reuse).exists():
        reuse = report_records(Path(args.reuse))
    elif args.reuse:  # the first call of a resumable bench: nothing to reuse yet
        print(f"[bench] --reuse {args.reuse}: no such report yet, every run is run")

    def report(runs) -> dict[str, Any]:
        return _write_report(runs, cfg, args, out, name)

    if args.report_only:  # what has finished so far (a bench can be stopped and resumed)
        summary = report(finished_runs(out, run_configs(cfg, modes, args.seeds), reuse))
    else:
        train = _runner(args)
        threads = 1
        if args.jobs > 1:  # each run's torch on an equal share of the cores
            from spotlight.rewards.ocr import available_cpus

            threads = max(1, available_cpus() // args.jobs)
        runs = run_runs(
            cfg, out, modes, args.seeds, train, sys.stdout, reuse, report, args.jobs, threads
        )
        summary = report(runs)
    _print_summary(summary, out, name)
    return 0


def _runner(args: argparse.Namespace):
    """``train(config, run_dir, resume)`` of ``--runner``: the Ray job (one Ray for all runs)
    or the local runner."""
    if args.runner == "local":
        return train_local
    from spotlight.job.cluster import connect
    from spotlight.job.options import RayOptions
    from spotlight.job.run import run_ray

    opts = RayOptions(num_samplers=args.samplers, wandb=False)
    connect(opts)
    return lambda cfg, run_dir, resume: run_ray(cfg, run_dir, resume=resume, opts=opts, log=None)


def train_local(cfg: Config, run_dir: Path, resume: bool) -> None:
    """One bench run with the local runner (module-level: ``--jobs`` runs it in a process)."""
    from spotlight.training.run_local import run_local

    run_local(cfg, run_dir, resume=resume)


def _write_report(runs, cfg: Config, args: argparse.Namespace, out: Path, name: str):
    """``out/NAME.json`` and ``out/NAME.png`` from the runs finished so far."""
    from spotlight.bench import plot_exploration, summarize_runs

    summary = summarize_runs(runs, args.target_delta)
    summary.update(
        runner=args.runner,
        recipe=cfg.recipe,
        task=cfg.task,
        iterations=cfg.num_iterations,
        seeds=args.seeds,
        val_prompts=cfg.num_val_prompts,
        val_seeds=cfg.num_val_seeds,
        val_every=cfg.val_every,
        budget_seeds=cfg.exploration.budget_seeds,
        max_candidates=cfg.exploration.max_candidates,
        stop_at_target=args.stop_at_target,
        max_wall_s=cfg.max_wall_s,
        overrides=args.set,
    )
    summary["val_standard_error"] = _val_standard_error(summary, cfg)
    (out / f"{name}.json").write_text(json.dumps(summary, indent=1) + "\n")
    plot_exploration(summary, out / f"{name}.png")
    return summary


def _val_standard_error(summary: dict[str, Any], cfg: Config) -> dict[str, Any]:
    """The noise of one validation (binary rewards: an upper bound, see
    ``bench_stats.binomial_se``) at the runs' mean initial and final validation reward."""
    from spotlight.bench_stats import binomial_se

    runs = [r for m in summary["modes"].values() for r in m["runs"]]
    n = cfg.num_val_prompts * cfg.num_val_seeds
    out: dict[str, Any] = {"samples_per_validation": n}
    for key, field in (("at_initial", "initial_val_reward"), ("at_final", "final_val_reward")):
        vals = [r[field] for r in runs if r.get(field) is not None]
        if vals:
            out[key] = binomial_se(sum(vals) / len(vals), n)
    return out


def _exploration_config(args: argparse.Namespace) -> Config:
    """The recipe with the bench's flags and ``--set`` overrides, validated."""
    cfg = apply_overrides(get_recipe(args.recipe), args.set)
    cfg = dataclasses.replace(
        cfg,
        num_iterations=args.iterations or cfg.num_iterations,
        val_every=args.val_every or cfg.val_every,
        stop_at_val_gain=args.target_delta if args.stop_at_target else cfg.stop_at_val_gain,
        max_wall_s=args.max_wall_min * 60 if args.max_wall_min else cfg.max_wall_s,
        exploration=dataclasses.replace(
            cfg.exploration,
            budget_seeds=args.budget_seeds
            if args.budget_seeds is not None
            else cfg.exploration.budget_seeds,
        ),
    )
    cfg.validate()
    return cfg


def _print_summary(summary: dict[str, Any], out: Path, name: str) -> None:
    for mode, m in summary["modes"].items():
        rho = m["rank_spearman_stale_fresh"]["mean"]
        gain = m["val_gain_per_iteration_mean"]
        its = m.get("iterations_to_target_mean")
        print(
            f"[bench] {mode}: target reached {m['reached_target']}"
            + (f" in {its:.1f} iterations (mean)" if its is not None else "")
            + ", final val "
            f"{m['final_val_reward_mean']:.4f}"
            + (f" ({gain:+.4f} an iteration)" if gain is not None else "")
            + f", group std {m['group_reward_std_mean']:.4f}, "
            f"zero-std groups {m['zero_std_group_share']:.1%}, "
            f"{m['wall_s_per_iteration_mean']:.1f} s/iteration"
            + (f", stale/fresh Spearman {rho:.2f}" if rho is not None else "")
        )
        if "val_auc_diff_vs_off" in m:
            auc, its = m["val_auc_diff_vs_off"], m["iterations_to_target_ratio_vs_off"]
            print(
                f"[bench]   vs off on {len(m['paired_seeds'])} seed(s): validation AUC"
                f" {auc['mean']:+.4f} (90% {auc['lo90']:+.4f} to {auc['hi90']:+.4f}),"
                f" iterations to target {its['mean']:.2f}x"
                f" (90% {its['lo90']:.2f}x to {its['hi90']:.2f}x, a lower bound when censored)"
            )
    print(f"[bench] -> {out / (name + '.json')}, {out / (name + '.png')}")


def add_parser(sub) -> None:
    from spotlight.job.options import RayOptions

    bench = sub.add_parser("bench", help="benchmarks that need real runs")
    bench.add_argument("what", choices=["exploration", "regroup"])
    bench.add_argument(
        "--out", required=True, help="folder for exploration.json and the runs / regroup.json"
    )
    _add_exploration_flags(bench)
    bench.add_argument("--samplers", type=int, default=RayOptions().num_samplers)
    bench.add_argument("--repeats", type=int, default=5, help="regroup: repetitions")
    bench.add_argument(
        "--checkpoint-mb", type=int, default=256, help="regroup: checkpoint size to load cold"
    )
    bench.set_defaults(func=_bench)


def _add_exploration_flags(bench: argparse.ArgumentParser) -> None:
    """``bench exploration``: the runs (recipe, modes, seeds, target) and the report."""
    from spotlight.bench import MODES

    modes = " ".join(MODES)
    bench.add_argument("--recipe", default=DEFAULT_RECIPE, choices=sorted(RECIPES))
    bench.add_argument("--iterations", type=int, help="iterations per run (default: recipe's)")
    bench.add_argument("--val-every", type=int, help="validation interval (default: recipe's)")
    bench.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds")
    bench.add_argument("--modes", nargs="+", help="subset of the modes (default: all): " + modes)
    bench.add_argument(
        "--runner",
        choices=["ray", "local"],
        default="ray",
        help="exploration: the Ray job (default) or the local runner (same seeds and"
        " selections; exploration sampled in turn, so wall times do not compare)",
    )
    bench.add_argument(
        "--target-delta", type=float, default=0.15, help="target = initial validation + this"
    )
    bench.add_argument(
        "--stop-at-target",
        action="store_true",
        help="end each run at its first validation that reaches the target",
    )
    bench.add_argument(
        "--max-wall-min", type=float, help="cap each run at this many minutes (then validate)"
    )
    bench.add_argument(
        "--budget-seeds",
        type=int,
        help="fixed exploration budget per iteration, explored in full (exploration.budget_seeds)",
    )
    bench.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe field, e.g. --set num_val_seeds=2 (repeatable)",
    )
    bench.add_argument("--name", help="exploration: output file stem (default: exploration)")
    bench.add_argument(
        "--report-only",
        action="store_true",
        help="exploration: write the report from the runs already finished, run nothing",
    )
    bench.add_argument(
        "--reuse",
        metavar="REPORT",
        help="exploration: an earlier report (NAME.json) whose runs of the same config count as"
        " finished (none yet if it does not exist); so a bench resumes on a machine that keeps the"
        " report but not --out's run folders",
    )
    bench.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="exploration, --runner local: runs at once, each in its own process whose torch"
        " uses an equal share of the cores (the runs' results do not depend on it)",
    )
