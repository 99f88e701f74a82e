"""Validation scoring: sample each prompt with fixed seeds 0..S-1, score, summarize.

``spotlight eval`` and the training runs' ``val_reward`` share :func:`score_prompts`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch

from spotlight import progress
from spotlight.config import SamplerConfig
from spotlight.flow.sampler import sample
from spotlight.policies.base import Policy
from spotlight.rewards import Reward

STD_THRESHOLD = 0.1
"""A prompt 'has something to learn from' when its reward std across seeds reaches this."""


@dataclass
class PromptScores:
    """Rewards of one prompt for seeds 0..S-1."""

    prompt: str
    seeds: list[int]
    rewards: list[float]


def score_prompts(
    policy: Policy,
    reward: Reward,
    prompts: list[str],
    num_seeds: int,
    sampler: SamplerConfig,
    weights_version: int = 0,
    chunk: int = 256,
    log: TextIO | None = None,
) -> list[PromptScores]:
    """Sample every prompt with seeds ``0..num_seeds-1`` and score the images (a progress bar
    of images on ``log``)."""
    if num_seeds < 1:
        raise ValueError(f"num_seeds must be >= 1, got {num_seeds}")
    flat = [(p, s) for p in prompts for s in range(num_seeds)]
    rewards: list[float] = []
    with progress.bar(log, "scoring", len(flat), unit="images") as bar:
        for lo in range(0, len(flat), chunk):
            part = flat[lo : lo + chunk]
            trajs = sample(
                policy, [p for p, _ in part], [s for _, s in part], sampler, weights_version
            )
            images = policy.decode(torch.stack([tr.latents for tr in trajs]))
            rewards.extend(float(r) for r in reward(images, [p for p, _ in part]))
            bar.update(len(part))
    return [
        PromptScores(p, list(range(num_seeds)), rewards[i * num_seeds : (i + 1) * num_seeds])
        for i, p in enumerate(prompts)
    ]


def summarize(scores: list[PromptScores]) -> dict[str, float]:
    """Mean reward, mean per-prompt std, and the share of prompts whose std >= 0.1."""
    table = np.array([s.rewards for s in scores], dtype=np.float64)
    std = table.std(axis=1)
    return {
        "mean_reward": float(table.mean()),
        "mean_prompt_std": float(std.mean()),
        "frac_prompts_std_ge_0.1": float((std >= STD_THRESHOLD).mean()),
        "frac_prompts_all_zero": float((table.max(axis=1) == 0).mean()),
    }


def write_eval(
    out_dir: Path, task: str, checkpoint: str, scores: list[PromptScores], extra: dict[str, Any]
) -> Path:
    """Write ``out_dir/eval.json``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "task": task,
        "checkpoint": checkpoint,
        "num_prompts": len(scores),
        "num_seeds": len(scores[0].seeds) if scores else 0,
        **summarize(scores),
        **extra,
        "per_prompt": [s.__dict__ for s in scores],
    }
    path = out_dir / "eval.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path
