"""Cheaper candidates? Seeds explored with k denoising steps against their full schedule.

python benchmarks/short_candidates.py --stale spotlight/assets/ocr-mini.safetensors \\
    --fresh runs/exact-v1/checkpoint/policy.safetensors --steps 2 3 5 --out docs/bench

Seed exploration samples every candidate with the task's whole schedule (10 steps). A k-step
candidate costs about k/10 of one, so the same sampler time explores about 10/k times as many
seeds, if the k-step reward ranks the seeds the way the full one does. The screen samples the
first ``--num-prompts`` training prompts with seeds 0..N-1 on the stale weights (the ones
exploration runs on), once with the full schedule and once per k (the same seeds: the same
initial noise; each step's noise drawn from the seed), and, with ``--fresh``, once more with
the full schedule on the next weights (the ones the rollout samples with). Per k it reports:

* the mean per-prompt Spearman between the k-step and the full graded OCR scores (prompts where
  both vary), and the same on the exact-match reward (``score == 1``);
* of the groups that G random seeds leave dead under the exact reward, the share that
  max-variance selection on the k-step exact rewards rescues, judged on the full rewards (stale,
  and fresh with ``--fresh``), against selection on the full stale rewards themselves.

The bar for building an arm from it, set before the screen ran: some k with a mean Spearman of
the graded scores >= 0.7 and >= 80% of the full selection's rescues (judged on the stale full
rewards). Scores are kept in the output (``short-candidates-<task>.json``) and a rerun reuses
them.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dead_groups import relative, sample_scores

from spotlight.explore.dead_groups import rescued_dead_share
from spotlight.explore.seeds import spearman
from spotlight.rewards.ocr import binarize

MIN_SPEARMAN = 0.7
"""The screen's bar: mean per-prompt Spearman of the graded scores, k steps against full."""
MIN_RESCUE_RATIO = 0.8
"""The screen's bar: k-step selection's rescues as a share of full selection's."""


def mean_spearman(a: list[list[float]], b: list[list[float]]) -> tuple[float | None, int]:
    """Mean per-prompt Spearman over the prompts where both sides vary, and their number."""
    rho = [spearman(x, y) for x, y in zip(a, b, strict=True)]
    rho = [r for r in rho if not np.isnan(r)]
    return (float(np.mean(rho)) if rho else None), len(rho)


def exact(scores: list[list[float]]) -> list[list[float]]:
    return [binarize(np.asarray(s), 1.0).tolist() for s in scores]


def screen(scores: dict[str, list[list[float]]], steps: list[int], group: int) -> dict:
    """The per-k figures from the sampled graded scores (keys ``full``, ``fresh``, ``k<k>``)."""
    full, fresh = scores["full"], scores.get("fresh")
    rescue_full = rescued_dead_share(exact(full), exact(full), group)
    rows = {}
    for k in steps:
        short = scores[f"k{k}"]
        rho, n = mean_spearman(short, full)
        rho_exact, n_exact = mean_spearman(exact(short), exact(full))
        rescue = rescued_dead_share(exact(full), exact(short), group)
        row = {
            "spearman_graded_mean": rho,
            "spearman_graded_prompts": n,
            "spearman_exact_mean": rho_exact,
            "spearman_exact_prompts": n_exact,
            "rescued_share": rescue,
            "rescued_share_full_selection": rescue_full,
            "rescue_ratio": rescue / rescue_full if rescue is not None and rescue_full else None,
        }
        if fresh is not None:
            row["rescued_share_on_fresh"] = rescued_dead_share(exact(fresh), exact(short), group)
            row["rescued_share_on_fresh_full_selection"] = rescued_dead_share(
                exact(fresh), exact(full), group
            )
        row["passes"] = bool(
            rho is not None
            and rho >= MIN_SPEARMAN
            and row["rescue_ratio"] is not None
            and row["rescue_ratio"] >= MIN_RESCUE_RATIO
        )
        rows[f"k{k}"] = row
    return rows


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="ocr-mini")
    ap.add_argument("--stale", required=True, help="the weights exploration samples with")
    ap.add_argument("--fresh", help="the next weights (the rollout's), to judge rescues on")
    ap.add_argument("--steps", type=int, nargs="+", default=[2, 3, 5])
    ap.add_argument("--num-prompts", type=int, default=64, help="first N training prompts")
    ap.add_argument("--num-seeds", type=int, default=32, help="seeds 0..N-1 per prompt")
    ap.add_argument("--group", type=int, default=8, help="group size G")
    ap.add_argument("--out", default="docs/bench")
    args = ap.parse_args(argv)
    for name, path in (("--stale", args.stale), ("--fresh", args.fresh)):
        if path is not None and not Path(path).is_file():
            ap.error(f"{name} {path}: no such file")
    if args.num_seeds < args.group or any(k < 1 for k in args.steps):
        ap.error("need --num-seeds >= --group and every --steps >= 1")

    from spotlight.recipes import TASK_SAMPLER
    from spotlight.tasks import get_task

    prompts = get_task(args.task).prompts("train")[: args.num_prompts]
    path = Path(args.out) / f"short-candidates-{args.task}.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    same = old.get("stale") == relative(args.stale) and old.get("num_seeds") == args.num_seeds
    same = same and old.get("num_prompts") == len(prompts)
    scores = dict(old.get("scores", {})) if same else {}
    if old.get("fresh") != (relative(args.fresh) if args.fresh else None):
        scores.pop("fresh", None)
    runs = [("full", args.stale, TASK_SAMPLER.num_steps)]
    runs += [(f"k{k}", args.stale, k) for k in args.steps]
    runs += [("fresh", args.fresh, TASK_SAMPLER.num_steps)] if args.fresh else []
    doc = {
        "command": shlex.join(
            ["python", "benchmarks/short_candidates.py", *(argv or sys.argv[1:])]
        ),
        "task": args.task,
        "stale": relative(args.stale),
        "fresh": relative(args.fresh) if args.fresh else None,
        "full_steps": TASK_SAMPLER.num_steps,
        "group_size": args.group,
        "num_prompts": len(prompts),
        "num_seeds": args.num_seeds,
        "bar": {"spearman_graded_mean": MIN_SPEARMAN, "rescue_ratio": MIN_RESCUE_RATIO},
        "scores": scores,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    for key, ckpt, num_steps in runs:
        if key in scores:
            print(f"[short] {key}: scores reused from {path}")
            continue
        print(f"[short] {key}: {len(prompts)} prompts x {args.num_seeds} seeds, {num_steps} steps")
        scores[key] = sample_scores(args.task, ckpt, prompts, args.num_seeds, num_steps)
        path.write_text(json.dumps(doc, indent=1) + "\n")  # a stopped screen keeps what it has
    doc["screen"] = screen(scores, args.steps, args.group)
    doc["build_short_arm"] = any(r["passes"] for r in doc["screen"].values())
    path.write_text(json.dumps(doc, indent=1) + "\n")
    for key, r in doc["screen"].items():  # None: no prompt varies, or no group is dead
        print(
            f"[short] {key}: Spearman graded {_fmt(r['spearman_graded_mean'], '.3f')}"
            f" ({r['spearman_graded_prompts']} prompts), exact {r['spearman_exact_mean']}"
            f"; rescued {_fmt(r['rescued_share'], '.1%')} of dead groups against"
            f" {_fmt(r['rescued_share_full_selection'], '.1%')} by full selection"
            f" -> {'passes' if r['passes'] else 'does not pass'}"
        )
    print(f"[short] -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
