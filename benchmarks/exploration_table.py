"""The run-by-run table of an exploration report, as docs/benchmarks.md shows it.

    python benchmarks/exploration_table.py docs/bench/exploration-ocr-mini-exact-power.json

One row per run, seed by seed in the report's mode order: its validation curve, its mean
validation over the run (AUC), the iteration at which it reached the target ("-": never), its
dead-group share over the first 5 iterations and over the run, and the explored groups' std
(the kept seeds against the first G candidates; "-" for a run that explores nothing). Then a
line with the number of runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

HEADER = (
    "| mode | seed | validation ({prompts} x {seeds}) | AUC | at +{delta:.2f} ({target:.3f}) "
    "| dead groups (first 5 / run) | explored std, selected / first G |\n"
    "| --- | ---: | --- | ---: | --- | ---: | ---: |"
)


def rows(report: dict[str, Any]) -> list[str]:
    """The table's rows, seed by seed, modes in the report's order within a seed."""
    order = list(report["modes"])
    runs = [
        (r["seed"], order.index(m), m, r) for m, v in report["modes"].items() for r in v["runs"]
    ]
    out = []
    for seed, _, mode, r in sorted(runs, key=lambda x: x[:2]):
        curve = ", ".join(f"{p[2]:.3f}" for p in r["val_curve"])
        hit = "-" if r["iterations_to_target"] is None else str(r["iterations_to_target"])
        sel, first = (
            r.get("explored_selected_group_std_mean"),
            r.get("explored_random_group_std_mean"),
        )
        explored = "-" if sel is None or first is None else f"{sel:.3f} / {first:.3f}"
        dead = f"{r['zero_std_group_share_first5']:.0%} / {r['zero_std_group_share']:.0%}"
        out.append(
            f"| {mode} | {seed} | {curve} | {r['val_auc']:.3f} | {hit} | {dead} | {explored} |"
        )
    return out


def table(report: dict[str, Any]) -> str:
    """The header and :func:`rows` (the target: the runs' mean initial validation + delta)."""
    initial = [r["initial_val_reward"] for v in report["modes"].values() for r in v["runs"]]
    delta = report["target_delta"]
    head = HEADER.format(
        prompts=report["val_prompts"],
        seeds=report["val_seeds"],
        delta=delta,
        target=sum(initial) / len(initial) + delta,
    )
    return "\n".join([head, *rows(report)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report", type=Path, help="an exploration report (spotlight bench exploration)")
    args = ap.parse_args()
    report = json.loads(args.report.read_text())
    print(table(report))
    print(f"{sum(len(v['runs']) for v in report['modes'].values())} runs")


if __name__ == "__main__":
    main()
