"""``spotlight bench exploration``: the exploration modes against each other on real runs.

Runs the recipe once per (mode, training seed), on one Ray instance or with the local runner
(``--runner local``: the same seeds and selections, exploration sampled in turn with the rollout,
so iterations compare and wall times do not), with the same number of trained samples per
iteration in every mode:

* ``off``: plain GRPO with random seeds;
* ``critical_path``: explore with the fresh weights before each rollout (best-of-N);
* ``spot``: explore on the replicas during training, on weights one version stale;
* ``spot_uniform``: ``spot`` with the planner's uniform-allocation ablation;
* ``rescue``: ``spot`` that keeps random seeds, and the max-variance ones only for prompts whose
  random group would be dead on the explored (stale) rewards;
* ``full_pool``: ``critical_path`` whose advantages take mean and std over all the candidates;
* ``spot_live``: ``spot`` whose planner learns where exploring rescues dead groups
  (``planner_gain="live"``) instead of where it raises the selected std.

Writes ``DIR/exploration.json`` (per mode: iterations and wall time to the target, validation
gain per iteration, mean group reward std, share of zero-variance groups, the stale/fresh
Spearman distribution, per-run curves) and ``DIR/exploration.png`` (validation reward against
iteration and against time), again after every run, so a stopped bench has reported what
finished.

A re-run reuses the finished run folders under ``DIR/runs``, and, with ``reuse``, the run records
of an earlier report (each holds the config it ran): a bench can be stopped and resumed where the
run folders are not kept, as long as the report is.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from spotlight import bench_stats, progress
from spotlight.config import Config
from spotlight.explore.arms import ARMS, with_arm
from spotlight.sim.sim_fit import val_gain_per_iteration
from spotlight.training.run_folder import METRICS, SUMMARY

MODES = ARMS
"""The arms a bench may run (:data:`spotlight.explore.arms.ARMS`)."""


def run_runs(
    base: Config,
    out: Path,
    modes: list[str],
    seeds: list[int],
    train: Callable[[Config, Path, bool], Any],
    log: TextIO | None = None,
    reuse: dict[str, dict[str, Any]] | None = None,
    on_run: Callable[[dict[str, list[Run]]], None] | None = None,
    jobs: int = 1,
    threads: int = 1,
) -> dict[str, list[Run]]:
    """One run per (mode, seed) under ``out/runs``, by ``train(config, run_dir, resume)``;
    returns the runs by mode: run folders, or records from ``reuse`` (by run name) that ran the
    same config. ``on_run`` gets what has finished so far after each run. With ``jobs`` > 1,
    that many runs go at once, each in a process of its own on ``threads`` torch threads
    (:mod:`spotlight.bench_jobs`; ``train`` must then be a module-level function)."""
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    configs = run_configs(base, modes, seeds)
    pending = [key for key, cfg in configs.items() if _finished(out, *key, cfg, reuse) is None]
    bar = progress.bar(
        log,
        "bench",
        len(configs),
        initial=len(configs) - len(pending),
        unit="runs",
        every_s=None,
        leave=True,
    )
    work = _work(out, configs, pending, reuse, log)
    label = {run_name(m, s): f"{m}, seed {s}" for m, s in pending}

    def started(name: str) -> None:
        progress.line(log, f"[bench] {label[name]} -> {out / 'runs' / name}")
        bar.set_postfix_str(label[name])

    def done(name: str) -> None:
        bar.update(1)
        if jobs > 1:  # runs finish out of order: say which
            progress.line(log, f"[bench] {label[name]} finished")
        if on_run is not None:
            on_run(finished_runs(out, configs, reuse))

    try:
        if jobs > 1:
            from spotlight.bench_jobs import run_parallel

            def going(names: list[str]) -> None:
                progress.line(log, "[bench] going: " + "; ".join(_where(out, n) for n in names))

            run_parallel(work, train, jobs, threads, done, started, going)
        else:
            for name, cfg, run_dir, resume in work:
                started(name)
                train(cfg, run_dir, resume)
                done(name)
    finally:
        bar.close()
    return finished_runs(out, configs, reuse)


def _work(out: Path, configs, pending, reuse, log) -> list[tuple[str, Config, Path, bool]]:
    """``(name, config, run_dir, resume)`` of each pending run: a re-run continues where it
    stopped (a run folder with a checkpoint resumes)."""
    work = []
    for mode, seed in pending:
        run_dir = out / "runs" / run_name(mode, seed)
        if run_dir.name in (reuse or {}):
            progress.line(log, f"[bench] {run_dir.name}: the earlier report holds another config")
        resume = (run_dir / "checkpoint" / "state.json").exists()
        work.append((run_dir.name, configs[mode, seed], run_dir, resume))
    return work


def _where(out: Path, name: str) -> str:
    """``NAME at I/N iterations`` of a run going in ``out/runs/NAME`` (its metrics rows)."""
    run_dir = out / "runs" / name
    rows = run_dir / METRICS
    done = len(rows.read_text().splitlines()) if rows.exists() else 0
    try:
        total = json.loads((run_dir / "config.json").read_text())["num_iterations"]
    except (OSError, ValueError, KeyError):  # not written yet: the run is starting
        return f"{name} starting"
    return f"{name} at {done}/{total} iterations"


Run = Path | dict[str, Any]  # a run folder, or a record of an earlier report


def run_name(mode: str, seed: int) -> str:
    return f"{mode}-seed{seed}"


def run_config(base: Config, mode: str, seed: int) -> Config:
    """The config the bench runs for one (mode, training seed)."""
    return dataclasses.replace(base, seed=seed, exploration=with_arm(base.exploration, mode))


def run_configs(base: Config, modes: list[str], seeds: list[int]) -> dict[tuple[str, int], Config]:
    """The bench's configs by (mode, seed), seed by seed (the order runs are run and reported)."""
    return {(m, s): run_config(base, m, s) for s in seeds for m in modes}


def finished_runs(
    out: Path,
    configs: dict[tuple[str, int], Config],
    reuse: dict[str, dict[str, Any]] | None = None,
) -> dict[str, list[Run]]:
    """The runs of ``configs`` (by (mode, seed)) that have finished, by mode: a folder under
    ``out/runs`` with a ``summary.json``, else a record of ``reuse`` that ran the same config.
    Modes with none are left out."""
    runs: dict[str, list[Run]] = {}
    for (mode, seed), cfg in configs.items():
        if (run := _finished(out, mode, seed, cfg, reuse)) is not None:
            runs.setdefault(mode, []).append(run)
    return {m: runs[m] for m in {m: None for m, _ in configs} if m in runs}


def _finished(out: Path, mode: str, seed: int, cfg: Config, reuse) -> Run | None:
    """The finished run of ``cfg``: its folder (refused if it holds another config), else a
    record of ``reuse`` that ran ``cfg``, else None."""
    run_dir = out / "runs" / run_name(mode, seed)
    _check_same_config(run_dir, cfg)
    if (run_dir / SUMMARY).exists():
        return run_dir
    return reusable_record(reuse, run_dir.name, cfg)


def report_records(path: Path) -> dict[str, dict[str, Any]]:
    """The run records of an earlier report (``exploration.json``), by run name."""
    doc = json.loads(path.read_text())
    return {r["run"]: r for m in doc["modes"].values() for r in m["runs"]}


def reusable_record(reuse: dict[str, dict[str, Any]] | None, name: str, cfg: Config):
    """The record of run ``name`` in ``reuse`` if it ran ``cfg`` (records without a config,
    from reports written before records held one, are not reused)."""
    record = (reuse or {}).get(name)
    if record is None or "config" not in record or not _same_config(record["config"], cfg):
        return None
    return record


def _same_config(ran: dict[str, Any], cfg: Config) -> bool:
    # Through from_dict: a field added since the run was written takes its default there too;
    # paths compare relative to the repository, as reports write them.
    ran = repo_relative(Config.from_dict(ran).to_dict())
    return json.loads(json.dumps(ran)) == json.loads(json.dumps(repo_relative(cfg.to_dict())))


def _check_same_config(run_dir: Path, cfg: Config) -> None:
    """A re-run reuses a run folder only if it ran this very config."""
    path = run_dir / "config.json"
    if path.exists() and not _same_config(json.loads(path.read_text()), cfg):
        raise ValueError(
            f"{run_dir} holds a run of another config (compare its config.json); use another"
            " --out, or delete it to run it again"
        )


def summarize_runs(folders: dict[str, list[Run]], target_delta: float) -> dict[str, Any]:
    """The figures of ``exploration.json`` from the run folders and reused records."""
    out: dict[str, Any] = {"target_delta": target_delta, "modes": {}}
    for mode, dirs in folders.items():
        runs = [_run_figures(d, target_delta) for d in dirs]
        for r in runs:
            r["val_gain_per_iteration"] = val_gain_per_iteration(r["val_curve"])
            r["seed"] = r["config"]["seed"]
            r["val_auc"] = bench_stats.val_auc(r["val_curve"]) if len(r["val_curve"]) > 1 else None
            r["iterations_to_target_censored"] = bench_stats.censored_iterations(r)
        reached = [r for r in runs if r["iterations_to_target"] is not None]
        rho = [x for r in runs for x in r["spearman"]]
        out["modes"][mode] = {
            "runs": runs,
            "reached_target": f"{len(reached)}/{len(runs)}",
            "iterations_to_target_median": _median([r["iterations_to_target"] for r in reached]),
            "iterations_to_target_mean": _mean([r["iterations_to_target"] for r in reached]),
            "wall_s_to_target_median": _median([r["wall_s_to_target"] for r in reached]),
            "wall_s_to_target_mean": _mean([r["wall_s_to_target"] for r in reached]),
            "final_val_reward_mean": _mean([r["final_val_reward"] for r in runs]),
            "val_auc_mean": _mean([r["val_auc"] for r in runs]),
            "iterations_to_target_censored_mean": _mean(
                [r["iterations_to_target_censored"] for r in runs]
            ),
            "val_gain_per_iteration_mean": _mean([r["val_gain_per_iteration"] for r in runs]),
            "group_reward_std_mean": _mean([r["group_reward_std_mean"] for r in runs]),
            "zero_std_group_share": _mean([r["zero_std_group_share"] for r in runs]),
            "zero_std_group_share_first5": _mean(
                [r.get("zero_std_group_share_first5") for r in runs]
            ),
            "explored_selected_group_std_mean": _mean(
                [r.get("explored_selected_group_std_mean") for r in runs]
            ),
            "explored_random_group_std_mean": _mean(
                [r.get("explored_random_group_std_mean") for r in runs]
            ),
            "wall_s_per_iteration_mean": _mean([r["wall_s_per_iteration"] for r in runs]),
            "rank_spearman_stale_fresh": {
                "n": len(rho),
                "mean": _mean(rho),
                "median": _median(rho),
                "min": min(rho) if rho else None,
                "max": max(rho) if rho else None,
            },
        }
    for mode, paired in bench_stats.paired_report(out["modes"]).items():
        out["modes"][mode].update(paired)
    planner = bench_stats.planner_report(out["modes"])
    if planner is not None:
        out["planner"] = planner
    return out


def _run_figures(run: Run, target_delta: float) -> dict[str, Any]:
    if isinstance(run, dict):  # a record of an earlier report: its target from its curve
        initial = run["initial_val_reward"]
        hit = next((p for p in run["val_curve"][1:] if p[2] >= initial + target_delta), None)
        return {
            **run,
            "iterations_to_target": hit[0] if hit else None,
            "wall_s_to_target": hit[1] if hit else None,
        }
    run_dir = run
    rows = [json.loads(x) for x in (run_dir / METRICS).read_text().splitlines() if x]
    initial = json.loads((run_dir / "val_initial.json").read_text())["val_reward"]
    target = initial + target_delta
    hit = next((r for r in rows if r.get("val_reward", -1.0) >= target), None)
    groups = [r["num_samples"] for r in rows]
    zero = sum(r["zero_std_groups"] for r in rows)
    config = json.loads((run_dir / "config.json").read_text())
    group_size = config["grpo"]["group_size"]
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
        "zero_std_group_share_first5": sum(r["zero_std_groups"] for r in rows[:FIRST])
        / max(1, sum(groups[:FIRST]) / group_size),
        "explored_selected_group_std_mean": _finite_mean(rows, "explored_selected_group_std"),
        "explored_random_group_std_mean": _finite_mean(rows, "explored_random_group_std"),
        "wall_s_per_iteration": rows[-1]["wall_s"] / len(rows) if rows else None,
        "spearman": [
            r["rank_spearman_stale_fresh"]
            for r in rows
            if isinstance(r.get("rank_spearman_stale_fresh"), float)
            and not math.isnan(r["rank_spearman_stale_fresh"])
        ],
        "config": repo_relative(config),
    }


ROOT = Path(__file__).resolve().parents[1]
"""The repository: paths under it are written relative to it in reports."""


def repo_relative(value: Any) -> Any:
    """``value`` (JSON-like) with every absolute path under the repository made relative to it,
    so a report holds no path of the machine it ran on."""
    if isinstance(value, dict):
        return {k: repo_relative(v) for k, v in value.items()}
    if isinstance(value, list):
        return [repo_relative(v) for v in value]
    if isinstance(value, str) and value.startswith(f"{ROOT}/"):
        return value[len(str(ROOT)) + 1 :]
    return value


def plot_exploration(summary: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paired = [
        (m, v["val_auc_diff_vs_off"]) for m, v in summary["modes"].items() if "paired_seeds" in v
    ]
    fig, axes = plt.subplots(
        1, 3 if paired else 2, figsize=(16 if paired else 11, 3.8), constrained_layout=True
    )
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
    if paired:  # each arm's mean validation over the run against off's, seed by seed
        ax = axes[2]
        colors = {m: f"C{k}" for k, m in enumerate(summary["modes"])}  # as on the curves
        for j, (mode, iv) in enumerate(paired):
            err = [[iv["mean"] - iv["lo90"]], [iv["hi90"] - iv["mean"]]]
            ax.errorbar([j], [iv["mean"]], yerr=err, fmt="o", capsize=4, color=colors[mode])
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xticks(range(len(paired)), [m for m, _ in paired], fontsize=8)
        ax.set_ylabel("validation AUC - off's (paired, 90%)")
        ax.grid(alpha=0.3)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


FIRST = 5
"""Iterations over which ``zero_std_group_share_first5`` is taken (the start of a run)."""


def _finite_mean(rows: list[dict[str, Any]], key: str) -> float | None:
    """Mean of the finite values of ``key`` over metrics rows (None when none has one)."""
    xs = [r[key] for r in rows if isinstance(r.get(key), float) and math.isfinite(r[key])]
    return _mean(xs)


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
