"""``spotlight simulate``: every system on one scenario and trace; summary.json and a report.

Writes ``DIR/summary.json`` (per system: ``time_to_target_h``, ``cost_usd``, ``iterations``,
``time_per_iteration_s``, ``on_demand_gpus``, ``total_gpus``, ``gpu_util_spot``,
``gpu_util_on_demand``, ``preemptions``, ``work_redone_gpu_h`` and more; ``ratios``: every other
system over Spotlight, the time ratio split into time per iteration x iterations;
``best_baselines``: the fastest baseline at Spotlight's on-demand GPUs, at its total GPUs and at
no more than its cost), ``DIR/report.md`` and three plots: ``reward_vs_time.png``,
``cost_vs_time.png`` and ``utilization.png`` (Spotlight's spot GPUs held over time, with
preemptions marked).
"""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing
import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, TextIO

from spotlight.scheduling.costs import PriceTable
from spotlight.scheduling.traces import CapacityTrace, load_trace
from spotlight.sim.scenarios import SCENARIOS
from spotlight.sim.sim_model import SYSTEMS, LearningModel, Scenario
from spotlight.sim.simulator import RunResult, Simulation

PAPER = {"speedup_vs_baselines": 4.0, "cost_ratio_range": [1.4, 6.4]}
"""The source paper's claims: same target validation score 4x faster, 1.4-6.4x cheaper."""

BASELINES = (
    "on_demand_grpo",
    "on_demand_critical_path",
    "colocated",
    "colocated_same_total",
    "async_one_step",
    "on_demand_grpo_split",
    "async_one_step_split",
    "spot_grpo",
)
"""What a user would run instead of Spotlight (the ablations are Spotlight with a part changed)."""

EVERY_WINDOW = ("spotlight", "spotlight_pipelined")
"""Run on every trace window, as the spot baselines are (the summary shows the first's median
window; the goals report the spread of both); their ablations, on that window (by default)."""

FRAMINGS = {
    "equal_on_demand_gpus": "at Spotlight's on-demand GPUs",
    "equal_total_gpus": "at Spotlight's total GPUs",
    "at_most_spotlight_cost": "at no more than Spotlight's cost",
}
"""How a baseline is matched to Spotlight in ``best_baselines`` (GPU counts: ``System``)."""

MEASURED_VS_MODELLED = [
    (
        "measured",
        "step costs: sampling from calib/h200-qwen-image-recipe.json (the recipes' sampler with"
        " its LoRA), the update from calib/h200-qwen-image.json (20.4 B DiT, CUDA events), on"
        " one H200",
    ),
    ("measured", "spot capacity over time: the replayed trace (SkyPilot or Oobleck, real AWS/GCP)"),
    (
        "measured",
        "prompt population: per-prompt rewards of 8 seeds from the tiny base model's eval",
    ),
    ("measured", "stale/fresh rank preservation 0.67 (OCR-mini, docs/benchmarks.md)"),
    ("code", "queue, spill rule, planner and seed selection: the real modules, imported"),
    ("modelled", "plain GRPO's iterations to the target (LearningModel.baseline_iterations)"),
    (
        "modelled",
        "progress per iteration = (share of live groups / plain GRPO's) ** k"
        " (LearningModel.signal and live_exponent, fitted from exploration runs on a reward"
        " with dead groups: docs/simulator.md)",
    ),
    ("modelled", "overheads: weights broadcast, replica start, notices, leases"),
    ("chosen", "spot capacity in whole nodes of Scenario.gpus_per_node GPUs (8: p5/p4d)"),
    ("modelled", "SP efficiency by degree (1280x1280); preemption notice share"),
    (
        "modelled",
        "update time scales linearly with data-parallel GPUs (colocated systems train on their"
        " own GPU count)",
    ),
    ("measured", "one-step-stale progress x LearningModel.async_staleness_factor (1.0, OCR-mini)"),
    ("chosen", "GPU counts, prompts per iteration, group size (stated per scenario)"),
]


def simulate(
    scenario: str | Scenario,
    trace: str | None,
    out: Path,
    systems: list[str] | None = None,
    prices: PriceTable | None = None,
    learning: LearningModel | None = None,
    seed: int = 0,
    log: TextIO | None = None,
    trace_windows: int = 1,
    workers: int = 1,
    ablation_windows: str = "median",
) -> dict[str, Any]:
    """Run ``systems`` (default: all) and write the summary and report to ``out``.

    ``workers`` > 1 runs the simulations (a system on a window each) in that many processes;
    the results, and the log's order, are those of running them one after another.

    With ``trace_windows`` N > 1 every spot system runs N times, the trace started at N evenly
    spaced offsets of its loop (window 0: where it first has capacity). The on-demand systems
    do not depend on the trace and run once; Spotlight and pipelined Spotlight (``EVERY_WINDOW``)
    run on every window, their ablations (one part changed) on Spotlight's median window only
    (``ablation_windows="all"``: every window). The summary's systems, ratios and best baselines
    are those of the **median window** (Spotlight's median time to target; a system's own
    median when Spotlight did not run), and ``trace_windows`` gives every window's time and
    cost per spot system with their median and range."""
    sc, names = _check(scenario, systems, trace_windows, workers, ablation_windows)
    cap = load_trace(trace or sc.trace)
    prices = prices or PriceTable()
    learning = learning or LearningModel()
    out.mkdir(parents=True, exist_ok=True)
    offsets = window_offsets_s(cap, trace_windows)
    spot = {n for n in names if SYSTEMS[n].samplers == "spot"}
    later = []  # the spot ablations, run on Spotlight's median window once it is known
    if ablation_windows == "median" and "spotlight" in names and len(offsets) > 1:
        later = [n for n in names if n in spot and n not in (*BASELINES, *EVERY_WINDOW)]
    jobs = [
        (name, k, off)
        for name in names
        if name not in later
        for k, off in enumerate(offsets if name in spot else [0.0])
    ]
    run = (sc, cap, prices, learning, seed, workers, log, len(offsets) > 1)
    runs = _run_jobs(jobs, *run)
    median = _median_window(runs)
    if later:
        runs.update(_run_jobs([(n, median, offsets[median]) for n in later], *run))
        runs = {n: runs[n] for n in names}
    results = {n: rs[median if len(rs) > 1 else 0] for n, rs in runs.items()}
    summary = {
        "scenario": _scenario_dict(sc),
        "trace": cap.name,
        "seed": seed,
        "prices": dataclasses.asdict(prices),
        "learning": dataclasses.asdict(learning),
        "systems": {n: r.summary() for n, r in results.items()},
        "trace_windows": _windows_summary(runs, offsets, median),
        "ratios": _ratios(results),
        "best_baselines": _best_baselines(results),
        "paper": PAPER,
        "measured_vs_modelled": [{"kind": k, "what": w} for k, w in MEASURED_VS_MODELLED],
    }
    _write(out, summary, results, sc.name, cap.name)
    if log is not None:
        print(f"[simulate] -> {out}/summary.json, report.md, *.png", file=log, flush=True)
    return summary


def _check(scenario, systems, trace_windows, workers, ablation_windows):
    """The scenario and the system names, after checking ``simulate``'s arguments."""
    if isinstance(scenario, str) and scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    sc = SCENARIOS[scenario] if isinstance(scenario, str) else scenario
    names = systems or list(SYSTEMS)
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise ValueError(f"unknown system(s) {unknown}; known: {', '.join(SYSTEMS)}")
    if trace_windows < 1:
        raise ValueError(f"trace_windows must be >= 1, got {trace_windows}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if ablation_windows not in ("median", "all"):
        raise ValueError(f"ablation_windows must be 'median' or 'all', got {ablation_windows!r}")
    return sc, names


def _write(out: Path, summary: dict, results: dict[str, RunResult], scenario, trace) -> None:
    """summary.json, timelines.json, the plots and report.md."""
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    timelines = {
        n: {"timeline": r.timeline, "preemptions_h": r.preemption_times_h}
        for n, r in results.items()
    }
    (out / "timelines.json").write_text(json.dumps(timelines))
    _plots(results, out, scenario, trace)
    (out / "report.md").write_text(_report(summary))


def _run_jobs(
    jobs: list[tuple[str, int, float]], sc, cap, prices, learning, seed, workers, log, windowed
) -> dict[str, list[RunResult]]:
    """Run ``(system, window, offset)`` jobs; every system's results in window order."""
    args = [(sc, SYSTEMS[name], cap, prices, learning, seed, off) for name, _, off in jobs]
    runs: dict[str, list[RunResult]] = {}
    for (name, k, off), (r, took_s) in zip(jobs, _run_all(args, workers), strict=True):
        runs.setdefault(name, []).append(r)
        if log is not None:
            spot = SYSTEMS[name].samplers == "spot"
            where = f" window {k} (+{off / 3600:.1f} h)" if windowed and spot else ""
            _log_run(log, name + where, r, took_s)
    return runs


def _run_one(args: tuple) -> tuple[RunResult, float]:
    """One simulation (``Simulation``'s arguments) and the seconds it took."""
    t0 = time.perf_counter()
    r = Simulation(*args).run()
    return r, time.perf_counter() - t0


def _run_all(jobs: list[tuple], workers: int) -> Iterator[tuple[RunResult, float]]:
    """``_run_one`` of every job, in order: one after another, or in ``workers`` processes
    (each simulation is deterministic given its arguments, so the results are the same)."""
    if workers <= 1 or len(jobs) <= 1:
        yield from map(_run_one, jobs)
        return
    # forkserver: a clean process to fork from (the caller may hold threads); the workers
    # import the simulator once and keep its per-process caches (the fitted rewards)
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx) as pool:
        futures = [pool.submit(_run_one, job) for job in jobs]
        try:
            for f in futures:
                yield f.result()
        finally:
            for f in futures:
                f.cancel()  # after a failure: do not run the rest


def window_offsets_s(trace: CapacityTrace, n: int) -> list[float]:
    """``n`` evenly spaced start offsets over the trace's loop from its first capacity."""
    first = next((t for t, c in zip(trace.times_s, trace.counts, strict=True) if c > 0), 0.0)
    span = trace.duration_s - first if first < trace.duration_s else trace.duration_s
    return [k * span / n for k in range(n)]


def _time_key(r: RunResult) -> float:
    return r.time_to_target_h if r.time_to_target_h is not None else math.inf


def _median_window(runs: dict[str, list[RunResult]]) -> int:
    """The window whose Spotlight time to target is the median (the lower one of an even
    count); without Spotlight, the first spot system's."""
    ref = runs.get("spotlight") or next((rs for rs in runs.values() if len(rs) > 1), None)
    if not ref or len(ref) == 1:
        return 0
    order = sorted(range(len(ref)), key=lambda k: (_time_key(ref[k]), k))
    return order[(len(order) - 1) // 2]


def _windows_summary(
    runs: dict[str, list[RunResult]], offsets: list[float], median: int
) -> dict[str, Any]:
    def spread(values: list[float | None]) -> dict[str, Any]:
        known = sorted(v for v in values if v is not None)
        return {
            "values": values,
            "median": statistics.median(known) if known else None,
            "min": known[0] if known else None,
            "max": known[-1] if known else None,
            "not_reached": sum(v is None for v in values),
        }

    return {
        "n": len(offsets),
        "offsets_h": [o / 3600 for o in offsets],
        "median_window": median,
        "by_system": {
            n: {
                "time_to_target_h": spread([r.time_to_target_h for r in rs]),
                "cost_usd": spread([r.ledger.cost_usd() for r in rs]),
            }
            for n, rs in runs.items()
            if len(rs) > 1
        },
    }


def _log_run(log: TextIO, label: str, r: RunResult, took_s: float) -> None:
    s = r.summary()
    ttt = s["time_to_target_h"]
    print(
        f"[simulate] {label}: "
        + (f"target at {ttt:.2f} h" if ttt is not None else "target not reached")
        + f", ${s['cost_usd']:,.0f}, {s['iterations']} iterations,"
        f" util spot {s['gpu_util_spot']:.2f} on-demand"
        f" {s['gpu_util_on_demand']:.2f}, {s['preemptions']} preemptions ({took_s:.1f} s)",
        file=log,
        flush=True,
    )


def _scenario_dict(sc: Scenario) -> dict[str, Any]:
    d = dataclasses.asdict(sc)
    d["sp_efficiency"] = {str(k): v for k, v in sc.sp_efficiency.items()}
    d["step_costs"] = dataclasses.asdict(sc.costs())
    return d


def _ratios(results: dict[str, RunResult]) -> dict[str, dict[str, float | None]]:
    """Every other system over Spotlight (> 1: Spotlight is faster / cheaper / takes fewer):
    ``speedup`` (time to target) = ``time_per_iteration_ratio`` x ``iterations_ratio``, and
    ``cost_ratio``. Baselines first, then the ablations."""
    spot = results.get("spotlight")
    if spot is None or not spot.reached:
        return {}
    others = [n for n in BASELINES if n in results]
    others += [n for n in results if n not in others and n != "spotlight"]
    out = {}
    for name in others:
        out[name] = _over(results[name], spot)
    return out


def _over(r: RunResult, spot: RunResult) -> dict[str, float | None]:
    if not r.reached:
        return dict.fromkeys(
            ("speedup", "cost_ratio", "time_per_iteration_ratio", "iterations_ratio")
        )
    assert r.time_per_iteration_s is not None and spot.time_per_iteration_s is not None
    return {
        "speedup": r.time_to_target_h / spot.time_to_target_h,
        "cost_ratio": r.ledger.cost_usd() / spot.ledger.cost_usd(),
        "time_per_iteration_ratio": r.time_per_iteration_s / spot.time_per_iteration_s,
        "iterations_ratio": r.iterations / spot.iterations,
    }


def _best_baselines(results: dict[str, RunResult]) -> dict[str, dict[str, Any] | None]:
    """Per framing (``FRAMINGS``), the baseline that reaches the target first among those
    matched to Spotlight, with its ratios over Spotlight; None when no baseline ran that is
    matched and reached the target. ``matches_paper``: Spotlight is at least the paper's 4x
    faster and 1.4x cheaper than it."""
    spot = results.get("spotlight")
    if spot is None or not spot.reached:
        return {}
    matched = {
        "equal_on_demand_gpus": lambda r: r.on_demand_gpus == spot.on_demand_gpus,
        "equal_total_gpus": lambda r: r.total_gpus == spot.total_gpus,
        "at_most_spotlight_cost": lambda r: r.ledger.cost_usd() <= spot.ledger.cost_usd(),
    }
    out: dict[str, dict[str, Any] | None] = {}
    for framing in FRAMINGS:
        pool = [results[b] for b in BASELINES if b in results and results[b].reached]
        pool = [r for r in pool if matched[framing](r)]
        if not pool:
            out[framing] = None
            continue
        best = min(pool, key=lambda r: r.time_to_target_h or math.inf)
        ratios = _over(best, spot)
        out[framing] = {
            "system": best.system,
            "on_demand_gpus": best.on_demand_gpus,
            "total_gpus": best.total_gpus,
            "time_to_target_h": best.time_to_target_h,
            "cost_usd": best.ledger.cost_usd(),
            **ratios,
            "matches_paper": ratios["speedup"] >= PAPER["speedup_vs_baselines"]
            and ratios["cost_ratio"] >= PAPER["cost_ratio_range"][0],
        }
    return out


def _hours(offsets_h: list[float]) -> str:
    return ", ".join(f"{h:.1f}" for h in offsets_h) + " h"


def _plots(results: dict[str, RunResult], out: Path, scenario: str, trace: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for key, ylabel, fname in (
        ("val_reward", "validation reward (modelled)", "reward_vs_time.png"),
        ("cost_usd", "cost (USD)", "cost_vs_time.png"),
    ):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for name, r in results.items():
            ax.plot([p["t_h"] for p in r.timeline], [p[key] for p in r.timeline], label=name)
        ax.set_xlabel("hours")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{scenario}, trace {trace}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / fname, dpi=110)
        plt.close(fig)
    name = "spotlight" if "spotlight" in results else next(iter(results))
    r = results[name]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    a1.step([p["t_h"] for p in r.timeline], [p["spot_gpus"] for p in r.timeline], where="post")
    for t in r.preemption_times_h:
        a1.axvline(t, color="red", alpha=0.25, lw=0.8)
    a1.set_ylabel("spot GPUs held")
    a1.set_title(f"{name}: spot capacity (red: preemptions) and utilization")
    a2.plot([p["t_h"] for p in r.timeline], [p["util_spot"] for p in r.timeline], label="spot")
    a2.plot(
        [p["t_h"] for p in r.timeline], [p["util_on_demand"] for p in r.timeline], label="on-demand"
    )
    a2.set_ylabel("utilization so far")
    a2.set_xlabel("hours")
    a2.legend(fontsize=8)
    for a in (a1, a2):
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "utilization.png", dpi=110)
    plt.close(fig)


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _report(s: dict[str, Any]) -> str:
    sc = s["scenario"]
    lines = [
        f"# Simulation: {sc['name']}, trace {s['trace']}",
        "",
        f"{sc['trainer_gpus']} on-demand trainer GPUs; {sc['sampler_gpus']} sampler GPUs (spot at"
        f" full capacity, or on-demand for the on-demand systems), {sc['fallback_gpus']} on-demand"
        f" fallback GPUs for spill; the colocated systems sample and train in turn on the same"
        f" on-demand GPUs (column GPUs); {sc['image_tokens']} image tokens per sample, SP degree"
        f" {sc['sp_degree']}; {sc['prompts_per_iteration']} prompts x {sc['group_size']}"
        f" samples per iteration, {sc['num_steps']} steps. Prices: on-demand"
        f" ${s['prices']['on_demand_usd_per_gpu_h']:.2f}/GPU-h, spot"
        f" {100 * s['prices']['spot_discount']:.0f}% off.",
        "",
        "| system | GPUs on-demand / total | time to target (h) | cost (USD) | iterations |"
        " s / iteration | util spot | util on-demand | idle GPU-h | preemptions |"
        " work redone (GPU-h) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in s["systems"].items():
        lines.append(
            f"| {name} | {r['on_demand_gpus']} / {r['total_gpus']} |"
            f" {_fmt(r['time_to_target_h'], '.2f')} | {r['cost_usd']:,.0f} | {r['iterations']} |"
            f" {_fmt(r['time_per_iteration_s'], '.1f')} |"
            f" {r['gpu_util_spot']:.2f} | {r['gpu_util_on_demand']:.2f} | {r['idle_gpu_h']:,.0f} |"
            f" {r['preemptions']} | {r['work_redone_gpu_h']:.2f} |"
        )
    w = s.get("trace_windows", {})
    if w.get("n", 1) > 1:
        lines += [
            "",
            f"Trace windows: {w['n']} starts, {_hours(w['offsets_h'])} into the trace's loop;"
            f" the tables show window {w['median_window']}, Spotlight's median. Per window:",
            "",
            "| system | time to target (h): median (min-max) | cost (USD): median (min-max) |"
            " not reached |",
            "| --- | ---: | ---: | ---: |",
        ]
        for name, v in w["by_system"].items():
            t, c = v["time_to_target_h"], v["cost_usd"]
            lines.append(
                f"| {name} | {_fmt(t['median'], '.2f')} ({_fmt(t['min'], '.2f')}-"
                f"{_fmt(t['max'], '.2f')}) | {c['median']:,.0f} ({c['min']:,.0f}-{c['max']:,.0f})"
                f" | {t['not_reached']} |"
            )
    lines += [
        "",
        "Other systems over Spotlight (> 1: Spotlight faster / cheaper; time ratio = time per"
        " iteration ratio x iterations ratio; paper: 4x faster, 1.4-6.4x cheaper):",
        "",
        "| system | time ratio | s / iteration ratio | iterations ratio | cost ratio |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for b, v in s["ratios"].items():
        lines.append(
            f"| {b} | {_fmt(v['speedup'], '.2f')} | {_fmt(v['time_per_iteration_ratio'], '.2f')} |"
            f" {_fmt(v['iterations_ratio'], '.2f')} | {_fmt(v['cost_ratio'], '.2f')} |"
        )
    lines += ["", "The best baseline (first to the target) by how it is matched to Spotlight:", ""]
    for framing, label in FRAMINGS.items():
        b = s.get("best_baselines", {}).get(framing)
        if b is None:
            lines.append(f"- {label}: no baseline ran that is matched and reached the target")
            continue
        lines.append(
            f"- {label}: `{b['system']}` ({b['on_demand_gpus']} on-demand / {b['total_gpus']}"
            f" total GPUs), {b['time_to_target_h']:.2f} h, ${b['cost_usd']:,.0f}: time ratio"
            f" {b['speedup']:.2f} = {b['time_per_iteration_ratio']:.2f} per iteration x"
            f" {b['iterations_ratio']:.2f} iterations, cost ratio {b['cost_ratio']:.2f};"
            f" the paper's 4x and 1.4x {'reproduced' if b['matches_paper'] else 'not reproduced'}"
        )
    lines += ["", "What is measured and what is modelled:", ""]
    lines += [f"- **{m['kind']}**: {m['what']}" for m in s["measured_vs_modelled"]]
    lines += [
        "",
        "![reward](reward_vs_time.png) ![cost](cost_vs_time.png) ![utilization](utilization.png)",
        "",
    ]
    return "\n".join(lines)
