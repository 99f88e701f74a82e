"""Spot capacity of one pool against several pools used together, on the shipped traces.

    python benchmarks/trace_pools.py --out docs/bench

A sampler role offered on several instance types or zones (cluster.yaml's spot sampler types)
draws on several capacity pools; the simulator replays such a role on the union of the pools'
traces (``--trace A+B``: at every time the sum of their node counts, spotlight.scheduling.traces
``union``). For each shipped AWS trace alone and for unions of traces of the same pool size, this
reports the share of time with no spot node, the share with less than half the trace's peak,
the mean capacity as a share of the peak, and preemptions (nodes lost) per hour. It writes
``<out>/trace-pools.json`` (``command`` and ``rows``) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from spotlight.scheduling.traces import CapacityTrace, load_trace

POOLS = [
    ["preemption-4node-aws-us-east-1f-v100.json"],
    ["preemption-4node-aws-us-east-2a-v100.json"],
    ["preemption-4node-aws-us-east-1f-v100.json", "preemption-4node-aws-us-east-2a-v100.json"],
    ["availability-16node-aws-us-east-2b-v100.json"],
    ["availability-16node-aws-us-west-2a-v100.json"],
    [
        "availability-16node-aws-us-east-2b-v100.json",
        "availability-16node-aws-us-west-2a-v100.json",
    ],
]
"""Single pools and their unions: two 4-node pools, two 16-node pools (AWS, SkyPilot's traces)."""


def spans(trace: CapacityTrace) -> list[tuple[float, int]]:
    """``(seconds, nodes)`` of each step of the trace."""
    ends = [*trace.times_s[1:], trace.duration_s]
    return [(e - t, c) for t, e, c in zip(trace.times_s, ends, trace.counts, strict=True)]


def time_share(trace: CapacityTrace, below: float) -> float:
    """Share of the trace's time with fewer than ``below`` nodes."""
    low = sum(s for s, c in spans(trace) if c < below)
    return low / trace.duration_s if trace.duration_s > 0 else 0.0


def mean_capacity(trace: CapacityTrace) -> float:
    area = sum(s * c for s, c in spans(trace))
    return area / trace.duration_s if trace.duration_s > 0 else 0.0


def row(names: list[str]) -> dict:
    trace = load_trace("+".join(names))
    peak = trace.max_count
    hours = trace.duration_s / 3600
    return {
        "pools": names,
        "hours": round(hours, 1),
        "peak_nodes": peak,
        "zero_share": round(time_share(trace, 1), 3),
        "below_half_share": round(time_share(trace, peak / 2), 3),
        "mean_share_of_peak": round(mean_capacity(trace) / peak, 3) if peak else 0.0,
        "preemptions_per_hour": round(trace.preemptions() / hours, 2) if hours else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("docs/bench"))
    args = ap.parse_args(argv)
    rows = [row(names) for names in POOLS]
    command = "python benchmarks/trace_pools.py " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"command": command.strip(), "rows": rows}
    (args.out / "trace-pools.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(
        "| pools (`--trace`) | hours | peak nodes | no node | under half the peak | mean / peak |"
        " preemptions an hour |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        pools = " + ".join(n.removesuffix(".json") for n in r["pools"])
        print(
            f"| {pools} | {r['hours']} | {r['peak_nodes']} | {r['zero_share']:.1%} |"
            f" {r['below_half_share']:.1%} | {r['mean_share_of_peak']:.2f} |"
            f" {r['preemptions_per_hour']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
