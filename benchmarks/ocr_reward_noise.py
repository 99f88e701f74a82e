"""How noisy is the OCR reward on a model's own samples, and do Tesseract settings change that?

python benchmarks/ocr_reward_noise.py --prompts 32 --seeds 8 --out docs/bench

Samples the first ``--prompts`` training prompts of OCR-mini with ``--seeds`` seeds each from
the base model (``--checkpoint``, default the shipped one; the task recipe's sampler), then
scores the same images with each Tesseract setting. Per setting: the mean reward, the share of
groups (a prompt's seeds) whose rewards are all equal (zero std: no GRPO signal), the share of
each reward value (on 3-letter words the score takes only 0, 1/3, 2/3 and 1), and the
test-retest noise: the mean absolute change of the reward when the image is shifted by one
pixel, or its gray levels by +8, changes a reader of the sign would not notice. Writes
``ocr_reward_noise.json``. Results: docs/tasks.md, "The OCR reward on the model's samples".
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

from spotlight.bench import repo_relative
from spotlight.flow.sampler import sample
from spotlight.policies.tiny import TinyPolicy
from spotlight.recipes import TASK_SAMPLER
from spotlight.rewards.ocr import UPPERCASE, OcrReward
from spotlight.tasks import base_checkpoint, get_task

SETTINGS: list[dict] = [
    {"psm": 7},  # the reward's defaults: one text line, 3x bicubic
    {"psm": 8},
    {"psm": 7, "whitelist": UPPERCASE},
    {"psm": 8, "whitelist": UPPERCASE},
    {"psm": 7, "scale": 2},
    {"psm": 7, "scale": 4},
]


def perturbed(images: np.ndarray) -> dict[str, np.ndarray]:
    """Copies a reader would call the same sign: one pixel right, and 8 gray levels lighter."""
    edge = images[:, :, :1]
    return {
        "shift_1px": np.concatenate([edge, images[:, :, :-1]], axis=2),
        "lighter_8": np.clip(images.astype(np.int16) + 8, 0, 255).astype(np.uint8),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", default=base_checkpoint("ocr-mini"))
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--out", default="docs/bench")
    args = ap.parse_args()
    t0 = time.perf_counter()
    policy = TinyPolicy.load(args.checkpoint)
    prompts = [p for p in get_task("ocr-mini").prompts("train")[: args.prompts]]
    flat = [p for p in prompts for _ in range(args.seeds)]
    seeds = [s for _ in prompts for s in range(args.seeds)]
    with torch.no_grad():
        trajs = sample(policy, flat, seeds, TASK_SAMPLER)
        images = policy.decode(torch.stack([t.latents for t in trajs]))
    print(f"[ocr-noise] sampled {len(flat)} images ({time.perf_counter() - t0:.0f} s)", flush=True)
    rows = []
    for setting in SETTINGS:
        reward = OcrReward(**setting)
        r = reward(images, flat)
        groups = r.reshape(len(prompts), args.seeds)
        values, counts = np.unique(np.round(r, 3), return_counts=True)
        row = {
            "setting": {k: v for k, v in setting.items() if k != "whitelist"}
            | ({"whitelist": "A-Z"} if "whitelist" in setting else {}),
            "mean_reward": float(r.mean()),
            "zero_std_groups": float((groups.std(axis=1) == 0).mean()),
            "mean_group_std": float(groups.std(axis=1).mean()),
            "value_shares": {
                f"{v:.3f}": float(c / r.size) for v, c in zip(values, counts, strict=True)
            },
        }
        for name, copy in perturbed(images).items():
            row[f"retest_abs_change_{name}"] = float(np.abs(reward(copy, flat) - r).mean())
        rows.append(row)
        print(f"[ocr-noise] {row}", flush=True)
    checkpoint = repo_relative(args.checkpoint)  # inside the repository: relative to it
    doc = {
        "checkpoint": checkpoint,
        "prompts": args.prompts,
        "seeds": args.seeds,
        "sampler": TASK_SAMPLER.__dict__,
        "settings": rows,
        "seconds": time.perf_counter() - t0,
        "machine": platform.machine(),
        "command": "python benchmarks/ocr_reward_noise.py "
        f"--checkpoint {checkpoint} --prompts {args.prompts} --seeds {args.seeds}",
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ocr_reward_noise.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"[ocr-noise] -> {out / 'ocr_reward_noise.json'}")


if __name__ == "__main__":
    main()
