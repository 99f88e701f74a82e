"""``spotlight bench exploration``: the exploration modes against each other on real runs.

Runs the recipe once per (mode, training seed) on one Ray instance, with the same number of
trained samples per iteration in every mode:

* ``off``: plain GRPO with random seeds;
* ``critical_path``: explore with the fresh weights before each rollout (best-of-N);
* ``spot``: explore on the replicas during training, on weights one version stale;
* ``spot_uniform``: ``spot`` with the planner's uniform-allocation ablation.

Writes ``DIR/exploration.json`` (per mode: iterations and wall time to the target, mean group
reward std, share of zero-variance groups, the stale/fresh Spearman distribution, per-run
curves) and ``DIR/exploration.png`` (validation reward against iteration and against time).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from pathlib import Path
from typing import Any, TextIO

from spotlight import progress
from spotlight.config import Config
from spotlight.training.run_folder import METRICS, SUMMARY

MODES = {
    "off": {"mode": "off"},
    "critical_path": {"mode": "critical_path"},
    "spot": {"mode": "spot"},
    "spot_uniform": {"mode": "spot", "uniform": True},
}


def run_runs(
    base: Config,
    out: Path,
    modes: list[str],
    seeds: list[int],
    opts,
    log: TextIO | None = None,
) -> dict[str, list[Path]]:
    """One Ray run per (mode, seed) under ``out/runs``; returns the run folders by mode."""
    from spotlight.job.run import run_ray

    folders: dict[str, list[Path]] = {m: [] for m in modes}
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    done = len([d for ds in finished_runs(out, modes, seeds).values() for d in ds])
    bar = progress.bar(
        log, "bench", len(seeds) * len(modes), initial=done, unit="runs", every_s=None, leave=True
    )
    for seed in seeds:
        for mode in modes:
            cfg = dataclasses.replace(
                base,
                seed=seed,
                exploration=dataclasses.replace(base.exploration, **MODES[mode]),
            )
            run_dir = out / "runs" / f"{mode}-seed{seed}"
            _check_same_config(run_dir, cfg)
            if not (run_dir / SUMMARY).exists():  # a re-run continues where it stopped
                progress.line(log, f"[bench] {mode}, seed {seed} -> {run_dir}")
                bar.set_postfix_str(f"{mode}, seed {seed}")
                resume = (run_dir / "checkpoint" / "state.json").exists()
                run_ray(cfg, run_dir, resume=resume, opts=opts, log=None)
                bar.update(1)
            folders[mode].append(run_dir)
    bar.close()
    return folders


def finished_runs(out: Path, modes: list[str], seeds: list[int]) -> dict[str, list[Path]]:
    """The run folders under ``out/runs`` that have finished (a ``summary.json``), by mode;
    modes with none are left out."""
    folders = {
        m: [d for seed in seeds if ((d := out / "runs" / f"{m}-seed{seed}") / SUMMARY).exists()]
        for m in modes
    }
    return {m: dirs for m, dirs in folders.items() if dirs}


def _check_same_config(run_dir: Path, cfg: Config) -> None:
    """A re-run reuses a run folder only if it ran this very config."""
    path = run_dir / "config.json"
    if not path.exists():
        return
    # Through from_dict: a field added since the run was written takes its default there too.
    ran = Config.from_dict(json.loads(path.read_text())).to_dict()
    if json.loads(json.dumps(ran)) != json.loads(json.dumps(cfg.to_dict())):
        raise ValueError(
            f"{run_dir} holds a run of another config (compare its config.json); use another"
            " --out, or delete it to run it again"
        )


def summarize_runs(folders: dict[str, list[Path]], target_delta: float) -> dict[str, Any]:
    """The figures of ``exploration.json`` from the run folders."""
    out: dict[str, Any] = {"target_delta": target_delta, "modes": {}}
    for mode, dirs in folders.items():
        runs = [_run_figures(d, target_delta) for d in dirs]
        reached = [r for r in runs if r["iterations_to_target"] is not None]
        rho = [x for r in runs for x in r["spearman"]]
        out["modes"][mode] = {
            "runs": runs,
            "reached_target": f"{len(reached)}/{len(runs)}",
            "iterations_to_target_median": _median([r["iterations_to_target"] for r in reached]),
            "wall_s_to_target_median": _median([r["wall_s_to_target"] for r in reached]),
            "final_val_reward_mean": _mean([r["final_val_reward"] for r in runs]),
            "group_reward_std_mean": _mean([r["group_reward_std_mean"] for r in runs]),
            "zero_std_group_share": _mean([r["zero_std_group_share"] for r in runs]),
            "wall_s_per_iteration_mean": _mean([r["wall_s_per_iteration"] for r in runs]),
            "rank_spearman_stale_fresh": {
                "n": len(rho),
                "mean": _mean(rho),
                "median": _median(rho),
                "min": min(rho) if rho else None,
                "max": max(rho) if rho else None,
            },
        }
    return out


def _run_figures(run_dir: Path, target_delta: float) -> dict[str, Any]:
    rows = [json.loads(x) for x in (run_dir / METRICS).read_text().splitlines() if x]
    initial = json.loads((run_dir / "val_initial.json").read_text())["val_reward"]
    target = initial + target_delta
    hit = next((r for r in rows if r.get("val_reward", -1.0) >= target), None)
    groups = [r["num_samples"] for r in rows]
    zero = sum(r["zero_std_groups"] for r in rows)
    group_size = json.loads((run_dir / "config.json").read_text())["grpo"]["group_size"]
    return {
        "run": run_dir.name,
        "initial_val_reward": initial,
        "final_val_reward": next(
            (r["val_reward"] for r in reversed(rows) if "val_reward" in r), None
        ),
        "val_curve": [(0, 0.0, initial)]
        + [(r["iteration"] + 1, r["wall_s"], r["val_reward"]) for r in rows if "val_reward" in r],
        "iterations_to_target": hit["iteration"] + 1 if hit else None,
        "wall_s_to_target": hit["wall_s"] if hit else None,
        "group_reward_std_mean": _mean([r["group_reward_std_mean"] for r in rows]),
        "zero_std_group_share": zero / max(1, sum(groups) / group_size),
        "wall_s_per_iteration": rows[-1]["wall_s"] / len(rows) if rows else None,
        "spearman": [
            r["rank_spearman_stale_fresh"]
            for r in rows
            if isinstance(r.get("rank_spearman_stale_fresh"), float)
            and not math.isnan(r["rank_spearman_stale_fresh"])
        ],
    }


def plot_exploration(summary: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), constrained_layout=True)
    for k, (mode, fig_mode) in enumerate(summary["modes"].items()):
        for j, run in enumerate(fig_mode["runs"]):
            its, walls, vals = zip(*run["val_curve"], strict=True)
            label = mode if j == 0 else None
            axes[0].plot(its, vals, "o-", color=f"C{k}", alpha=0.7, label=label)
            axes[1].plot([w / 60 for w in walls], vals, "o-", color=f"C{k}", alpha=0.7)
    axes[0].set_xlabel("iteration")
    axes[1].set_xlabel("minutes")
    for ax in axes:
        ax.set_ylabel("validation reward")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
