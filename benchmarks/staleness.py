"""What stale rollouts cost: on-policy training against rollouts sampled with the weights of one
and two versions ago, each to a validation target.

python benchmarks/staleness.py --recipe tiny-ocr --seeds 0 1 2 --target-delta 0.10 \\
    --set grpo.learning_rate=2e-6 --set num_val_seeds=2 --runs runs/staleness --out docs/bench

Each run is the local runner (``spotlight train --runner local``) on the recipe with ``seed=S``,
``exploration.mode=off`` and ``rollout_staleness=k`` (arms ``on_policy``, ``stale1``, ``stale2``:
k = 0, 1, 2), validating every ``--val-every`` iterations and stopping at its first validation at
or above its starting one + ``--target-delta``, or after ``--iterations`` or ``--max-wall-min``.
A one-step-stale pipeline trains iteration t on a rollout sampled with the weights before
update t - 1, which is ``stale1``. Finished runs (their ``summary.json``) are reused, and with
``--reuse REPORT`` the runs an earlier report holds with the same config (so a bench can go on
from its committed report when the run folders are gone); an unfinished one runs again from
its start (a stale run does not resume).

Writes ``staleness-<task>.json``: ``command``, ``task``, ``target_delta``, ``arms`` (per arm its
``runs``, each ``seed``, ``iterations_to_target``, ``val_gain_per_iteration``, the validation
curve, the run's other figures and its config; and ``iterations_to_target_mean``, where a run
that missed the target counts the iterations it ran, so the mean is then a lower bound, and
``reached``) and
``async_staleness_factor`` = mean iterations on-policy / mean iterations ``stale1``, clamped to
(0, 1] (the simulator's ``LearningModel.async_staleness_factor``); and ``staleness-<task>.png``.
One run at a time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from pathlib import Path

from spotlight.bench import reusable_record, summarize_runs
from spotlight.config import Config
from spotlight.overrides import apply_overrides
from spotlight.recipes import RECIPES, get_recipe

ARMS = {"on_policy": 0, "stale1": 1, "stale2": 2}
"""Arm -> ``rollout_staleness``."""


def run_config(args: argparse.Namespace, seed: int, staleness: int) -> Config:
    cfg = apply_overrides(get_recipe(args.recipe), args.set)
    cfg = dataclasses.replace(
        cfg,
        seed=seed,
        num_iterations=args.iterations,
        val_every=args.val_every,
        stop_at_val_gain=args.target_delta,
        max_wall_s=args.max_wall_min * 60,
        rollout_staleness=staleness,
        exploration=dataclasses.replace(cfg.exploration, mode="off"),
    )
    cfg.validate()
    return cfg


def one_run(args: argparse.Namespace, arm: str, seed: int, records: dict) -> Path | dict:
    """The run's folder, finished; or the record of ``records`` (an earlier report's runs, by
    name) that ran the same config."""
    from spotlight.training.run_local import run_local

    out = Path(args.runs) / f"{arm}-seed{seed}"
    cfg = run_config(args, seed, ARMS[arm])
    done = out / "summary.json"
    if done.exists() and json.loads((out / "config.json").read_text()) == cfg.to_dict():
        print(f"[staleness] {out}: finished, reused", flush=True)
        return out
    if (record := reusable_record(records, out.name, cfg)) is not None:
        print(f"[staleness] {out.name}: reused from {args.reuse}", flush=True)
        return record
    if out.exists():  # unfinished, or another config: again from the start
        import shutil

        shutil.rmtree(out)
    print(f"[staleness] {arm}, seed {seed} -> {out}", flush=True)
    run_local(cfg, out, log=sys.stdout)
    return out


def report_records(path: str | None) -> dict[str, dict]:
    """The runs of an earlier ``staleness-<task>.json``, by run name (none without a path)."""
    if path is None:
        return {}
    doc = json.loads(Path(path).read_text())
    return {r["run"]: r for arm in doc["arms"].values() for r in arm["runs"] if "run" in r}


def report(args: argparse.Namespace, runs: dict[str, list], argv: list[str]) -> dict:
    figures = summarize_runs(runs, args.target_delta)["modes"]
    arms = {}
    for arm in runs:
        rows = []
        for seed, run in zip(args.seeds, figures[arm]["runs"], strict=True):
            ran = run["val_curve"][-1][0]
            first = {
                "seed": seed,
                "iterations_to_target": run["iterations_to_target"],
                "val_gain_per_iteration": run["val_gain_per_iteration"],
                "iterations_run": ran,
                "initial_val_reward": run["initial_val_reward"],
                "val_curve": run["val_curve"],
            }
            rows.append({**first, **{k: v for k, v in run.items() if k not in first}})
        counted = [r["iterations_to_target"] or r["iterations_run"] for r in rows]
        arms[arm] = {
            "runs": rows,
            "reached": sum(r["iterations_to_target"] is not None for r in rows),
            "iterations_to_target_mean": sum(counted) / len(counted) if counted else None,
        }
    factor = None
    on, one = (arms.get(a, {}).get("iterations_to_target_mean") for a in ("on_policy", "stale1"))
    if on and one:
        factor = min(1.0, on / one)
    return {
        "command": "python benchmarks/staleness.py " + shlex.join(argv),
        "task": get_recipe(args.recipe).task,
        "recipe": args.recipe,
        "target_delta": args.target_delta,
        "overrides": args.set,
        "arms": arms,
        "async_staleness_factor": factor,
    }


def plot(doc: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for color, (arm, a) in zip(("C0", "C1", "C3"), doc["arms"].items(), strict=False):
        for k, run in enumerate(a["runs"]):
            its = [p[0] for p in run["val_curve"]]
            gains = [p[2] - run["initial_val_reward"] for p in run["val_curve"]]
            ax.plot(its, gains, color=color, alpha=0.8, label=arm if k == 0 else None)
    ax.axhline(doc["target_delta"], color="grey", ls="--", lw=0.8)
    ax.set_xlabel("iteration")
    ax.set_ylabel("validation reward - starting value")
    ax.set_title(f"{doc['recipe']}: on-policy against stale rollouts")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", default="tiny-ocr", choices=sorted(RECIPES))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--target-delta", type=float, default=0.10)
    ap.add_argument("--iterations", type=int, default=80)
    ap.add_argument("--val-every", type=int, default=2)
    ap.add_argument("--max-wall-min", type=float, default=30.0)
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE, repeatable")
    ap.add_argument("--runs", default="runs/staleness")
    ap.add_argument("--out", default="docs/bench")
    ap.add_argument(
        "--reuse",
        default=None,
        metavar="REPORT",
        help="an earlier staleness-<task>.json whose runs of the same config are reused",
    )
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    records = report_records(args.reuse)
    runs = {arm: [one_run(args, arm, seed, records) for seed in args.seeds] for arm in args.arms}
    doc = report(args, runs, argv)
    task = doc["task"] or args.recipe
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"staleness-{task}.json").write_text(json.dumps(doc, indent=1) + "\n")
    plot(doc, out / f"staleness-{task}.png")
    for arm, a in doc["arms"].items():
        its = [r["iterations_to_target"] for r in a["runs"]]
        print(f"[staleness] {arm}: {its}, mean {a['iterations_to_target_mean']}")
    print(f"[staleness] async_staleness_factor {doc['async_staleness_factor']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
