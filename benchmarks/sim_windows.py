"""The simulator on every shipped spot trace, 8 start windows each, against Spotlight's goal.

python benchmarks/sim_windows.py --out docs/sim/windows [--scenarios paper-512 paper-1280]

For each scenario and shipped trace it runs ``spotlight simulate --scenario S --trace T
--trace-windows 8`` (all systems) into ``<runs>/<S>/<trace>/`` (a re-run reuses finished
ones), times it, and keeps its ``summary.json`` and ``report.md`` under ``--out``. Then it
checks, on the median window of each, Spotlight's goal against the baselines users would
run (``sim_report.BASELINES``; the ablations are Spotlight with a part changed):

- no baseline both faster and cheaper than Spotlight;
- Spotlight faster than every baseline with the same on-demand GPUs;
- Spotlight cheaper than every baseline with the same total GPUs;

and pipelined Spotlight's goal (``spotlight_pipelined``, on the same window):

- no baseline both faster and cheaper than it;
- every baseline at least as fast as it costs at least 1.4x as much (the paper's low end);

with, for each baseline that breaks a check, its time and cost over pipelined Spotlight's. It
writes ``windows.json`` and ``windows.md`` (the table docs/simulator.md shows). One simulation
at a time, so that the wall times measure the simulator alone; a run folder whose summary lacks
a system the simulator has now is run again.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from spotlight.scheduling.traces import TRACES_DIR
from spotlight.sim.sim_model import SYSTEMS
from spotlight.sim.sim_report import BASELINES, PAPER

PIPELINED = "spotlight_pipelined"
PLAIN_PIPELINE = "ablation_pipelined_no_oversampling"
"""Pipelined Spotlight without its candidates: its goal is checked too (median window only)."""
PIPELINED_COST_RATIO = PAPER["cost_ratio_range"][0]
"""Every baseline at least as fast as pipelined Spotlight must cost this many times its cost."""


def shipped_traces() -> list[str]:
    return sorted(p.name for p in TRACES_DIR.glob("*/*") if p.suffix in (".csv", ".json"))


def run_one(scenario: str, trace: str, runs: Path, windows: int) -> dict:
    folder = runs / scenario / trace
    timing = folder / "wall_s.json"
    if not _complete(folder / "summary.json") or not timing.exists():
        shutil.rmtree(folder, ignore_errors=True)
        folder.parent.mkdir(parents=True, exist_ok=True)
        exe = str(Path(sys.executable).with_name("spotlight"))
        cmd = [exe, "simulate", "--scenario", scenario, "--trace", trace]
        cmd += ["--trace-windows", str(windows), "--out", str(folder)]
        print(f"[sim-windows] {scenario} {trace} ...", flush=True)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        timing.write_text(json.dumps({"wall_s": time.perf_counter() - t0}))
    summary = json.loads((folder / "summary.json").read_text())
    summary["wall_s"] = json.loads(timing.read_text())["wall_s"]
    return summary


def _complete(path: Path) -> bool:
    """A finished run of every system the simulator has now."""
    if not path.exists():
        return False
    return set(SYSTEMS) <= set(json.loads(path.read_text())["systems"])


def goal(summary: dict) -> dict:
    """The goal's three checks on the median window, with the baselines that break them."""
    systems = summary["systems"]
    spot = systems["spotlight"]
    base = {n: systems[n] for n in BASELINES if n in systems and systems[n]["reached_target"]}
    t, c = spot["time_to_target_h"], spot["cost_usd"]
    if not spot["reached_target"]:  # every baseline that got there beats it
        t = float("inf")
    dominated_by = [n for n, b in base.items() if b["time_to_target_h"] < t and b["cost_usd"] < c]
    same_od = {n: b for n, b in base.items() if b["on_demand_gpus"] == spot["on_demand_gpus"]}
    same_total = {n: b for n, b in base.items() if b["total_gpus"] == spot["total_gpus"]}
    slower_than = [n for n, b in same_od.items() if b["time_to_target_h"] <= t]
    dearer_than = [n for n, b in same_total.items() if b["cost_usd"] <= c]
    return {
        "no_baseline_faster_and_cheaper": not dominated_by,
        "faster_than_same_on_demand": not slower_than,
        "cheaper_than_same_total": not dearer_than,
        "faster_and_cheaper": dominated_by,
        "not_slower_same_on_demand": slower_than,
        "not_dearer_same_total": dearer_than,
        "holds": not (dominated_by or slower_than or dearer_than),
    }


def goal_pipelined(summary: dict, name: str = PIPELINED) -> dict | None:
    """Pipelined Spotlight's two checks on the median window for system ``name`` (None: it
    did not run), each with the baselines that break it and their ``time_ratio`` and
    ``cost_ratio`` over the system's (< 1: the baseline is faster / cheaper; None: it missed
    the target)."""
    systems = summary["systems"]
    pipe = systems.get(name)
    if pipe is None:
        return None
    base = {n: systems[n] for n in BASELINES if n in systems and systems[n]["reached_target"]}
    t = pipe["time_to_target_h"] if pipe["reached_target"] else float("inf")
    c = pipe["cost_usd"]

    def over(n: str) -> dict:
        b = base[n]
        ratio = b["time_to_target_h"] / t if pipe["reached_target"] else None
        return {"system": n, "time_ratio": ratio, "cost_ratio": b["cost_usd"] / c}

    dominated_by = [
        over(n) for n, b in base.items() if b["time_to_target_h"] < t and b["cost_usd"] < c
    ]
    cheap_fast = [
        over(n)
        for n, b in base.items()
        if b["time_to_target_h"] <= t and b["cost_usd"] < PIPELINED_COST_RATIO * c
    ]
    return {
        "no_baseline_faster_and_cheaper": not dominated_by,
        "as_fast_costs_1_4x": not cheap_fast,
        "faster_and_cheaper": dominated_by,
        "as_fast_under_1_4x_cost": cheap_fast,
        "holds": not (dominated_by or cheap_fast),
    }


def row(scenario: str, trace: str, s: dict) -> dict:
    spot = s["systems"]["spotlight"]
    tw = s["trace_windows"]["by_system"]["spotlight"]
    pipe = s["systems"].get(PIPELINED)
    pw = s["trace_windows"]["by_system"].get(PIPELINED)
    return {
        "scenario": scenario,
        "trace": trace,
        "wall_s": round(s["wall_s"], 1),
        "median_window": s["trace_windows"]["median_window"],
        "spotlight_h": spot["time_to_target_h"],
        "spotlight_usd": spot["cost_usd"],
        "spotlight_h_range": [tw["time_to_target_h"]["min"], tw["time_to_target_h"]["max"]],
        "spotlight_usd_range": [tw["cost_usd"]["min"], tw["cost_usd"]["max"]],
        "spot_grpo_h": s["systems"]["spot_grpo"]["time_to_target_h"],
        "best": s["best_baselines"],
        "goal": goal(s),
        "pipelined_h": pipe["time_to_target_h"] if pipe else None,
        "pipelined_usd": pipe["cost_usd"] if pipe else None,
        "pipelined_h_range": _range(pw, "time_to_target_h"),
        "pipelined_usd_range": _range(pw, "cost_usd"),
        "goal_pipelined": goal_pipelined(s),
        "plain_pipeline_h": _get(s, PLAIN_PIPELINE, "time_to_target_h"),
        "plain_pipeline_usd": _get(s, PLAIN_PIPELINE, "cost_usd"),
        "goal_plain_pipeline": goal_pipelined(s, PLAIN_PIPELINE),
    }


def _get(summary: dict, name: str, key: str) -> float | None:
    r = summary["systems"].get(name)
    return None if r is None else r[key]


def _range(windows: dict | None, key: str) -> list[float | None]:
    """[min, max] over the windows (None where the system ran on one window only)."""
    if not windows:
        return [None, None]
    return [windows[key]["min"], windows[key]["max"]]


def _h(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _usd(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _spread(mid: float | None, lo: float | None, hi: float | None, fmt) -> str:
    """``mid (lo-hi)``; ``-`` where the system did not run, no range where it ran once."""
    if mid is None and lo is None:
        return "-"
    return fmt(mid) + ("" if lo is None else f" ({fmt(lo)}-{fmt(hi)})")


def _ratios(broken: list[dict]) -> str:
    """``name (time x0.54, cost x0.97)`` per baseline."""
    return ", ".join(
        f"{b['system']} (time x{_h(b['time_ratio'])}, cost x{_h(b['cost_ratio'])})" for b in broken
    )


def _pipelined_goal(g: dict | None) -> str:
    if g is None:
        return "-"
    if g["holds"]:
        return "holds"
    broken = []
    if g["faster_and_cheaper"]:
        broken.append("faster and cheaper: " + _ratios(g["faster_and_cheaper"]))
    if g["as_fast_under_1_4x_cost"]:
        broken.append(
            f"as fast under {PIPELINED_COST_RATIO}x the cost: "
            + _ratios(g["as_fast_under_1_4x_cost"])
        )
    return "; ".join(broken)


def _best(r: dict, framing: str) -> str:
    b = r["best"].get(framing)
    if not b:
        return "-"
    return f"{b['system']} {_h(b['time_to_target_h'])} h ${b['cost_usd']:,.0f}"


def markdown(rows: list[dict]) -> str:
    head = (
        "| scenario | trace | wall (s) | Spotlight h, median (min-max) | $ median (min-max) |"
        " best at equal on-demand GPUs | best at equal total GPUs | goal |"
        " pipelined h, median window (min-max) | pipelined $ (min-max) | pipelined goal |"
        " pipelined without candidates: h, $ | its goal |\n"
        "| --- | --- | ---: | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    )
    lines = []
    for r in rows:
        g = r["goal"]
        broken = []
        if g["faster_and_cheaper"]:
            broken.append("faster and cheaper: " + ", ".join(g["faster_and_cheaper"]))
        if g["not_slower_same_on_demand"]:
            broken.append("not slower: " + ", ".join(g["not_slower_same_on_demand"]))
        if g["not_dearer_same_total"]:
            broken.append("not dearer: " + ", ".join(g["not_dearer_same_total"]))

        lo, hi = r["spotlight_h_range"]
        clo, chi = r["spotlight_usd_range"]
        plo, phi = r.get("pipelined_h_range", [None, None])
        pclo, pchi = r.get("pipelined_usd_range", [None, None])
        lines.append(
            f"| {r['scenario']} | {r['trace']} | {r['wall_s']:.0f} |"
            f" {_h(r['spotlight_h'])} ({_h(lo)}-{_h(hi)}) |"
            f" {r['spotlight_usd']:,.0f} ({clo:,.0f}-{chi:,.0f}) |"
            f" {_best(r, 'equal_on_demand_gpus')} | {_best(r, 'equal_total_gpus')} |"
            f" {'holds' if g['holds'] else '; '.join(broken)} |"
            f" {_spread(r.get('pipelined_h'), plo, phi, _h)} |"
            f" {_spread(r.get('pipelined_usd'), pclo, pchi, _usd)} |"
            f" {_pipelined_goal(r.get('goal_pipelined'))} |"
            f" {_h(r.get('plain_pipeline_h'))}, {_usd(r.get('plain_pipeline_usd'))} |"
            f" {_pipelined_goal(r.get('goal_plain_pipeline'))} |"
        )
    return head + "\n".join(lines) + "\n"


def without_images(report_md: str) -> str:
    """A run's report.md without its plot lines: the plots stay in ``--runs``, not in the
    kept copy, whose links would otherwise point at files that are not there."""
    lines = report_md.splitlines(keepends=True)
    return "".join(line for line in lines if not line.lstrip().startswith("!["))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("docs/sim/windows"))
    ap.add_argument("--runs", type=Path, default=Path("runs/sim-windows"))
    ap.add_argument("--scenarios", nargs="+", default=["paper-512", "paper-1280"])
    ap.add_argument("--traces", nargs="+", default=None, help="default: every shipped trace")
    ap.add_argument("--windows", type=int, default=8)
    args = ap.parse_args()
    rows = []
    for scenario in args.scenarios:
        for trace in args.traces or shipped_traces():
            s = run_one(scenario, trace, args.runs, args.windows)
            keep = args.out / scenario / Path(trace).stem
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(args.runs / scenario / trace / "summary.json", keep / "summary.json")
            report_md = (args.runs / scenario / trace / "report.md").read_text()
            (keep / "report.md").write_text(without_images(report_md))
            rows.append(row(scenario, trace, s))
            print(f"[sim-windows] {scenario} {trace}: {rows[-1]['wall_s']:.0f} s", flush=True)
    (args.out / "windows.json").write_text(json.dumps(rows, indent=1))
    (args.out / "windows.md").write_text(markdown(rows))
    print(markdown(rows))


if __name__ == "__main__":
    main()
