"""What a GenEval-mini base model draws: reward by category, the shapes the detector finds, a grid.

python benchmarks/geneval_samples.py --checkpoint spotlight/assets/geneval-mini.safetensors \\
    --name v1 --out docs/bench

Samples every validation prompt with seeds 0..N-1 as the task recipes do (10 SDE steps, eta
0.7, guidance 3) and writes ``geneval-samples-<name>.json``: the mean reward (fraction of the
prompt's clauses that hold) and the exact-match share per category, how many objects the
detector finds per image, and the shapes it calls them (``unknown``: no shape's outline test
passed, a blob), against the same counts on ground-truth renders of the same prompts; and
``geneval-samples-<name>.png``: the first 16 validation prompts, one row each, N samples then a
ground-truth render, scaled 4x.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from spotlight.bench import repo_relative
from spotlight.config import PolicyConfig
from spotlight.flow.sampler import sample
from spotlight.policies import make_policy
from spotlight.recipes import TASK_SAMPLER
from spotlight.rewards.geneval import clauses, detect
from spotlight.tasks import base_checkpoint, get_task
from spotlight.tasks.geneval_mini import parse

GRID_PROMPTS = 16


def census(images: list[np.ndarray], prompts: list[str]) -> dict:
    """Reward and detections of ``images`` (one per prompt in ``prompts``)."""
    by_cat: dict[str, list[tuple[bool, float]]] = collections.defaultdict(list)
    shapes: collections.Counter = collections.Counter()
    per_image: collections.Counter = collections.Counter()
    for image, prompt in zip(images, prompts, strict=True):
        spec, found = parse(prompt), detect(image)
        held = clauses(spec, found)  # what score() computes, with the detections kept
        by_cat[spec.category].append((all(held), sum(held) / len(held)))
        per_image[len(found)] += 1
        shapes.update(d.shape for d in found)
    every = [s for v in by_cat.values() for s in v]
    return {
        "mean_reward": float(np.mean([p for _, p in every])),
        "exact_share": float(np.mean([c for c, _ in every])),
        "by_category": {
            cat: {
                "images": len(v),
                "mean_reward": float(np.mean([p for _, p in v])),
                "exact_share": float(np.mean([c for c, _ in v])),
            }
            for cat, v in sorted(by_cat.items())
        },
        "objects_per_image": {str(k): per_image[k] for k in sorted(per_image)},
        "shapes_found": dict(shapes.most_common()),
        "unknown_shape_share": shapes["unknown"] / max(1, sum(shapes.values())),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", default=None, help="default: the shipped base model")
    ap.add_argument("--name", required=True, help="names the output files")
    ap.add_argument("--num-seeds", type=int, default=4)
    ap.add_argument("--out", default="docs/bench")
    args = ap.parse_args()
    task = get_task("geneval-mini")
    checkpoint = args.checkpoint or base_checkpoint(task.name)
    policy = make_policy(PolicyConfig(name="tiny", checkpoint=checkpoint), "cpu")
    prompts = task.prompts("val")
    flat = [(p, s) for p in prompts for s in range(args.num_seeds)]
    trajs = sample(policy, [p for p, _ in flat], [s for _, s in flat], TASK_SAMPLER)
    images = list(policy.decode(torch.stack([t.latents for t in trajs])))
    rng = np.random.default_rng(0)
    truth = [task.render(p, rng) for p, _ in flat]
    doc = {
        "command": (
            f"python benchmarks/geneval_samples.py --checkpoint {repo_relative(checkpoint)} "
            f"--name {args.name} --num-seeds {args.num_seeds} --out {args.out}"
        ),
        "checkpoint": repo_relative(checkpoint),
        "architecture": {
            k: getattr(policy.config, k) for k in ("patch", "num_layers", "num_heads", "head_dim")
        },
        "num_prompts": len(prompts),
        "num_seeds": args.num_seeds,
        "samples": census(images, [p for p, _ in flat]),
        "ground_truth": census(truth, [p for p, _ in flat]),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"geneval-samples-{args.name}.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    s = args.num_seeds
    rows = [
        np.concatenate([*images[i * s : (i + 1) * s], truth[i * s]], axis=1)
        for i in range(min(GRID_PROMPTS, len(prompts)))
    ]
    grid = np.concatenate(rows, axis=0)
    Image.fromarray(grid).resize((grid.shape[1] * 4, grid.shape[0] * 4), Image.NEAREST).save(
        path.with_suffix(".png")
    )
    got = doc["samples"]
    print(
        f"[geneval-samples] {args.name}: mean reward {got['mean_reward']:.3f}, exact "
        f"{got['exact_share']:.3f}, unknown shapes {got['unknown_shape_share']:.0%} "
        f"(ground truth {doc['ground_truth']['unknown_shape_share']:.0%}) -> {path}"
    )


if __name__ == "__main__":
    main()
