"""Where are the dead groups? Samples N seeds per prompt from checkpoints, no training.

python benchmarks/dead_groups.py --task ocr-mini --num-prompts 128 --num-seeds 32 \\
    --checkpoint base=spotlight/assets/ocr-mini.safetensors \\
    --checkpoint trained=runs/ocr-default/checkpoint/policy.safetensors --out docs/bench

Each checkpoint samples the first ``--num-prompts`` training prompts (the ones rollouts draw)
with seeds 0..N-1 and the task recipe's sampler; Tesseract reads every image once, and each
reward variant is computed from that read (``ocr``: the graded score; ``ocr-1of3``,
``ocr-2of3`` and ``ocr-exact``: the binary rewards ``score >= 1/3``, ``score >= 2/3`` and
``score == 1``). For a group of G per
reward variant (spotlight/explore/dead_groups.py): the share of dead groups (all G rewards equal)
among random G-subsets and among max-variance subsets of the N, and the mean std of a random and
of a selected group. Writes ``dead-groups-<task>.json`` (with every prompt's N graded scores, so
the report can be recomputed) and prints a table. A checkpoint whose scores are already in the
output file is not sampled again (``--force`` samples it anew), and need not exist any more.

``--easy-split CHECKPOINT VARIANT MIN_SUCCESS PATH`` also writes a prompt file
(``Config.prompt_file``) of the prompts that checkpoint gets right at least ``MIN_SUCCESS`` of
the time under that variant: every fourth of them (in the task's order) for validation, the rest
for training. Training from that checkpoint on those prompts starts where most of its groups
are all-correct or nearly, the saturated side of a binary reward.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from spotlight.explore.dead_groups import group_statistics
from spotlight.rewards.ocr import binarize

VARIANTS = {"ocr": None, "ocr-1of3": 1 / 3, "ocr-2of3": 2 / 3, "ocr-exact": 1.0}
"""Reward variant -> threshold on the graded OCR score (None: the graded score itself)."""

ROOT = Path(__file__).resolve().parents[1]


def variant_rewards(scores: list[list[float]], threshold: float | None) -> list[list[float]]:
    """Per prompt, the rewards of one variant from the graded scores."""
    if threshold is None:
        return scores
    return [binarize(np.asarray(s), threshold).tolist() for s in scores]


def sample_scores(
    task_name: str,
    checkpoint: str,
    prompts: list[str],
    num_seeds: int,
    num_steps: int | None = None,
):
    """Graded OCR scores of seeds 0..num_seeds-1 of every prompt, sampled from ``checkpoint``
    with the task sampler (``num_steps`` denoising steps instead of its own, when given)."""
    import dataclasses

    from spotlight.config import PolicyConfig
    from spotlight.policies import make_policy
    from spotlight.recipes import TASK_SAMPLER
    from spotlight.rewards import build_reward
    from spotlight.tasks import get_task
    from spotlight.training.evaluate import score_prompts
    from spotlight.training.run_folder import check_checkpoint_task

    task = get_task(task_name)
    if task.reward != "ocr":
        raise ValueError(f"--task {task_name}: the reward variants here are OCR's")
    check_checkpoint_task(checkpoint, task.name)
    policy = make_policy(PolicyConfig(name="tiny", checkpoint=checkpoint), "cpu")
    sampler = TASK_SAMPLER
    if num_steps is not None:
        sampler = dataclasses.replace(sampler, num_steps=num_steps)
    scores = score_prompts(
        policy, build_reward("ocr"), prompts, num_seeds, sampler, chunk=64, log=sys.stdout
    )
    return [s.rewards for s in scores]


def relative(path: str) -> str:
    p = Path(path).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else path


def report(doc: dict) -> str:
    lines = [
        f"G = {doc['group_size']} of N = {doc['num_seeds']} seeds, {doc['num_prompts']} prompts",
        "| checkpoint | reward | mean | dead (random G) | dead (max-variance) | std random"
        " | std selected |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for ck in doc["checkpoints"]:
        for name, r in ck["rewards"].items():
            lines.append(
                f"| {ck['name']} | {name} | {r['mean']:.3f} | {r['dead_share_random']:.1%} "
                f"| {r['dead_share_max_variance']:.1%} | {r['std_random']:.3f} "
                f"| {r['std_selected']:.3f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="ocr-mini")
    ap.add_argument("--checkpoint", action="append", required=True, help="NAME=PATH, repeatable")
    ap.add_argument("--num-prompts", type=int, default=128, help="first N training prompts")
    ap.add_argument("--num-seeds", type=int, default=32, help="seeds 0..N-1 per prompt")
    ap.add_argument("--group", type=int, default=8, help="group size G")
    ap.add_argument("--out", default="docs/bench")
    ap.add_argument("--force", action="store_true", help="sample every checkpoint anew")
    ap.add_argument(
        "--population",
        nargs=3,
        metavar=("CHECKPOINT", "VARIANT", "PATH"),
        help="also write one checkpoint's rewards under one variant as an eval.json-style prompt"
        " population (per_prompt rewards: the simulator's --prompts-file)",
    )
    ap.add_argument(
        "--easy-split",
        nargs=4,
        metavar=("CHECKPOINT", "VARIANT", "MIN_SUCCESS", "PATH"),
        help="also write a prompt file (Config.prompt_file) of the prompts CHECKPOINT gets right"
        " at least MIN_SUCCESS of the time under VARIANT (every fourth for validation)",
    )
    args = ap.parse_args(argv)
    if args.num_seeds < args.group:
        ap.error(f"--num-seeds ({args.num_seeds}) must be >= --group ({args.group})")
    named = []
    for spec in args.checkpoint:
        name, sep, path = spec.partition("=")
        if not sep or not name:
            ap.error(f"--checkpoint {spec!r}: want NAME=PATH")
        named.append((name, path))

    from spotlight.tasks import get_task

    prompts = get_task(args.task).prompts("train")[: args.num_prompts]
    path = Path(args.out) / f"dead-groups-{args.task}.json"
    old = json.loads(path.read_text()) if path.exists() and not args.force else {}
    cached = {
        c["name"]: c
        for c in old.get("checkpoints", [])
        if old.get("num_seeds") == args.num_seeds and old.get("num_prompts") == len(prompts)
    }
    for name, ckpt in named:
        if not Path(ckpt).is_file() and cached.get(name, {}).get("path") != relative(ckpt):
            ap.error(f"--checkpoint {name}={ckpt}: no such file (and no scores of it in {path})")
    checkpoints = []
    for name, ckpt in named:
        if name in cached and cached[name]["path"] == relative(ckpt):
            scores, seconds = cached[name]["scores"], cached[name]["seconds"]
            print(f"[dead-groups] {name}: scores reused from {path}")
        else:
            print(f"[dead-groups] {name}: sampling {len(prompts)} prompts x {args.num_seeds} seeds")
            t0 = time.perf_counter()
            scores = sample_scores(args.task, ckpt, prompts, args.num_seeds)
            seconds = round(time.perf_counter() - t0, 1)
        rewards = {
            v: group_statistics(variant_rewards(scores, t), args.group) for v, t in VARIANTS.items()
        }
        checkpoints.append(
            {
                "name": name,
                "path": relative(ckpt),
                "rewards": rewards,
                "seconds": seconds,
                "scores": scores,
            }
        )
    doc = {
        "command": shlex.join(["python", "benchmarks/dead_groups.py", *(argv or sys.argv[1:])]),
        "task": args.task,
        "group_size": args.group,
        "num_seeds": args.num_seeds,
        "num_prompts": len(prompts),
        "prompts": "the first num_prompts training prompts, seeds 0..num_seeds-1, the task sampler",
        "checkpoints": checkpoints,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(report(doc))
    print(f"[dead-groups] -> {path}")
    if args.population:
        write_population(doc, prompts, *args.population)
    if args.easy_split:
        write_easy_split(doc, prompts, *args.easy_split)
    return 0


def easy_split(
    prompts: list[str], rewards: list[list[float]], min_success: float
) -> tuple[list[str], list[str], list[float]]:
    """The prompts whose mean binary reward is at least ``min_success``, in order: (train,
    val, their success rates); every fourth of them is a validation prompt."""
    easy = [(p, float(np.mean(r))) for p, r in zip(prompts, rewards, strict=True)]
    easy = [(p, rate) for p, rate in easy if rate >= min_success]
    train = [p for k, (p, _) in enumerate(easy) if k % 4 != 3]
    val = [p for k, (p, _) in enumerate(easy) if k % 4 == 3]
    return train, val, [rate for _, rate in easy]


def checkpoint_rewards(doc: dict, flag: str, checkpoint: str, variant: str, binary: bool):
    """(the header of a file written from one checkpoint's rewards under ``variant``, the
    rewards); ``flag`` names the option in the error that refuses an unknown pair."""
    named = {c["name"]: c for c in doc["checkpoints"]}
    known = [v for v, t in VARIANTS.items() if t is not None or not binary]
    if checkpoint not in named or variant not in known:
        raise SystemExit(
            f"{flag} {checkpoint} {variant}: checkpoints {sorted(named)}, variants {sorted(known)}"
        )
    header = {
        "command": doc["command"],
        "task": doc["task"],
        "checkpoint": named[checkpoint]["path"],
        "reward": variant,
        "num_seeds": doc["num_seeds"],
    }
    return header, variant_rewards(named[checkpoint]["scores"], VARIANTS[variant])


def write_json(path: str, doc: dict, indent: int | None = None) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc, indent=indent) + "\n")


def write_easy_split(
    doc: dict, prompts: list[str], checkpoint: str, variant: str, min_success: str, path: str
) -> None:
    header, rewards = checkpoint_rewards(doc, "--easy-split", checkpoint, variant, binary=True)
    train, val, rates = easy_split(prompts, rewards, float(min_success))
    if len(train) < 2 or not val:
        raise SystemExit(
            f"--easy-split: {len(rates)} prompt(s) at or above {min_success}: too few to split"
        )
    mean = float(np.mean(rates))
    split = {**header, "min_success": float(min_success), "success_mean": mean}
    write_json(path, {**split, "train": train, "val": val}, indent=1)
    print(
        f"[dead-groups] {checkpoint} under {variant}: {len(rates)} prompts at >= {min_success}"
        f" (mean {mean:.3f}): {len(train)} train, {len(val)} val -> {path}"
    )


def write_population(doc: dict, prompts: list[str], checkpoint: str, variant: str, path: str):
    """One checkpoint's per-prompt rewards under ``variant``, in the ``per_prompt`` layout of
    ``spotlight eval``'s eval.json (what spotlight.sim.sim_rewards fits)."""
    header, rewards = checkpoint_rewards(doc, "--population", checkpoint, variant, binary=False)
    seeds = list(range(doc["num_seeds"]))
    population = {
        **header,
        "num_prompts": len(rewards),
        "mean_reward": float(np.mean(rewards)),
        "per_prompt": [
            {"prompt": p, "seeds": seeds, "rewards": r}
            for p, r in zip(prompts, rewards, strict=True)
        ],
    }
    write_json(path, population)
    print(f"[dead-groups] {checkpoint} under {variant}: population -> {path}")


if __name__ == "__main__":
    sys.exit(main())
