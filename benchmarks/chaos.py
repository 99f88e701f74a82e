"""Chaos bench: random faults in one Ray run, judged against the same run without faults.

    python benchmarks/chaos.py --iterations 44 --faults 20 --out docs/bench

draws a seeded schedule of faults (``spotlight.scheduling.chaos``: every kind at least
``--min-each`` times, at random iterations and moments, mid-commit and mid-broadcast among
them), starts a local Ray cluster (a head with the on-demand roles and ``--samplers`` spot
nodes, one sampler replica each), runs ``spotlight train`` on it as a driver process of its
own, and strikes each fault when its moment comes: the request queue, weights broadcast or
bandit state actor killed (Ray restarts it), a spot node drained with a notice or removed
without one (another joins), the reward replica's or a trainer worker's process killed, the
driver killed (then the run goes on with ``--resume``). After each fault it waits for the run
to commit its next iteration (the fault's recovery seconds). At the end the run's checkpoint
tensors and metrics rows (timing keys and fault counters aside) must equal the local runner's
run of the same config (bit-equal with one torch thread, as the Ray tests' baselines are), and
the rows' accounting must show no item lost and nothing trained twice
(``spotlight.training.chaos_check``). Writes ``<out>/chaos.json``. ``--baseline DIR`` reuses a
finished local run of the same config.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

from spotlight.scheduling.chaos import FaultKind

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# A removed node is seen dead in ~1.5 s, not ~15 s (as Ray's own test_draining.py does).
for _k, _v in {
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "500",
    "RAY_health_check_failure_threshold": "3",
    "RAY_health_check_initial_delay_ms": "0",
}.items():
    os.environ.setdefault(_k, _v)

MAX_EACH = {FaultKind.TRAINER: 2}
"""Ray Train restarts a driver's trainer after at most 2 worker failures (``FailureConfig``
in ``spotlight.job.launch``): more in one run would be a run that fails by design."""
BASELINE_POLL_S = 10.0
"""Between looks at a baseline run still running in another process."""
DRIVER_EXIT_TIMEOUT_S = 120.0
"""After the last fault, how long the run may take per iteration left."""


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--recipe", default="tiny-ocr")
    p.add_argument("--iterations", type=int, default=44)
    p.add_argument("--faults", type=int, default=20)
    p.add_argument("--min-each", type=int, default=2)
    p.add_argument("--kinds", nargs="*", default=None, help="fault kinds (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--samplers", type=int, default=2)
    p.add_argument("--set", action="append", default=[], dest="sets", metavar="KEY=VALUE")
    p.add_argument("--baseline", type=Path, default=None, help="a finished local run to reuse")
    p.add_argument("--baseline-only", action="store_true", help="run the baseline, no Ray")
    p.add_argument("--out", type=Path, required=True, help="folder for <name>.json")
    p.add_argument(
        "--work", type=Path, default=None, help="the runs' folder (default: out/<name>-runs)"
    )
    p.add_argument(
        "--note", default=None, help="what else ran on the machine (kept as timings_note)"
    )
    p.add_argument("--name", default="chaos")
    return p.parse_args(argv)


def config(args):
    from spotlight.overrides import apply_overrides
    from spotlight.recipes import get_recipe

    cfg = apply_overrides(get_recipe(args.recipe), list(args.sets))
    return dataclasses.replace(cfg, num_iterations=args.iterations)


def baseline_run(cfg, folder: Path) -> Path:
    """The local runner's run of ``cfg`` in ``folder`` (one torch thread), unless finished."""
    import torch

    from spotlight.training.run_local import run_local

    if (folder / "summary.json").exists():
        return folder
    if (folder / "config.json").exists():  # started elsewhere (--baseline): wait for its end
        while not (folder / "summary.json").exists():
            time.sleep(BASELINE_POLL_S)
        return folder
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_local(cfg, folder)
    finally:
        torch.set_num_threads(threads)
    return folder


def driver_command(args, run: Path, resume: bool) -> list[str]:
    cmd = [sys.executable, "-m", "spotlight.cli", "train", "--no-wandb", "--threads", "1"]
    cmd += ["--trainer-threads", "1", "--samplers", str(args.samplers), "--lease-s", "5"]
    if resume:
        return [*cmd, "--resume", str(run)]
    cmd += ["--recipe", args.recipe, "--iterations", str(args.iterations), "--out", str(run)]
    return cmd + [a for kv in args.sets for a in ("--set", kv)]


def command_line(argv: list[str]) -> str:
    """The bench's command, without ``--baseline DIR`` (where an equal run was reused) or
    ``--note``."""
    drop = ("--baseline", "--note")
    keep = [a for i, a in enumerate(argv) if not {a, argv[i - 1] if i else ""} & set(drop)]
    return "python benchmarks/chaos.py " + shlex.join(keep)


def summarize(faults: list[dict]) -> dict:
    """``kinds``: per kind ``injected``, ``recovered``, recovery seconds median and max."""
    kinds: dict[str, dict] = {}
    for f in faults:
        k = kinds.setdefault(f["kind"], {"injected": 0, "recovered": 0, "recovery_s": []})
        k["injected"] += f["injected"]
        if f.get("recovery_s") is not None:
            k["recovered"] += 1
            k["recovery_s"].append(f["recovery_s"])
    for k in kinds.values():
        times = k.pop("recovery_s")
        k["recovery_s_median"] = round(statistics.median(times), 2) if times else None
        k["recovery_s_max"] = round(max(times), 2) if times else None
    return kinds


def judge(run: Path, base: Path, num_iterations: int) -> dict:
    """The invariants: accounting of the rows, rows and checkpoint tensors against ``base``."""
    from safetensors.torch import load_file

    from spotlight.job.faults import rows_of
    from spotlight.training.chaos_check import accounting, row_differences, tensor_differences

    rows = rows_of(run)
    acc = accounting(rows, num_iterations)
    ckpt = "checkpoint/policy.safetensors"
    diffs = row_differences(rows, rows_of(base))
    if (run / ckpt).exists():
        diffs += tensor_differences(load_file(run / ckpt), load_file(base / ckpt))
    else:
        diffs.append("no checkpoint")
    return {
        "items_lost": acc.items_lost,
        "items_trained_twice": acc.items_trained_twice,
        "iterations_missing": acc.iterations_missing,
        "equal_to_fault_free": not diffs,
        "differences": diffs[:20],
    }


def main(argv=None) -> dict:
    from spotlight.job.faults import Striker
    from spotlight.scheduling.chaos import count_by_kind, draw_schedule

    args = parse(argv)
    cfg = config(args)
    kinds = tuple(FaultKind(k) for k in args.kinds) if args.kinds else tuple(FaultKind)
    schedule = draw_schedule(
        args.seed, args.iterations, kinds, args.min_each, args.faults, max_each=MAX_EACH
    )
    print(f"[chaos] {len(schedule)} faults: {count_by_kind(schedule)}", flush=True)
    work = args.work or args.out / f"{args.name}-runs"
    work.mkdir(parents=True, exist_ok=True)
    base = args.baseline or work / "fault-free"
    if args.baseline_only or not args.baseline:
        baseline_run(cfg, base)
    if args.baseline_only:
        return {"baseline": str(base)}
    run = work / "chaos"
    if run.exists():
        raise SystemExit(f"{run} exists: remove it to run the bench again")
    t0 = time.perf_counter()
    with Striker(args.samplers, work / "driver.log") as striker:
        striker.start_driver(driver_command(args, run, False))
        records = striker.carry_out(schedule, run, lambda: driver_command(args, run, True))
        rc = striker.finish(DRIVER_EXIT_TIMEOUT_S * args.iterations)
    baseline_run(cfg, base)  # a --baseline run in another process may still be running
    report = {
        "command": command_line(sys.argv[1:] if argv is None else argv),
        "recipe": args.recipe,
        "iterations": args.iterations,
        "seed": args.seed,
        "faults": len(schedule),
        "driver_exit_code": rc,
        "kinds": summarize(records),
        "iterations_redone": sum(r.get("iterations_redone", 0) for r in records),
        **judge(run, base, args.iterations),
        "wall_s": round(time.perf_counter() - t0, 1),
        **({"timings_note": args.note} if args.note else {}),
        "schedule": records,
    }
    out = args.out / f"{args.name}.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "schedule"}, indent=1))
    return report


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the cluster is shut down first
    main()
