"""Helpers of the Ray tests: small configs and options."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from spotlight.config import Config
from spotlight.job.options import RayOptions
from spotlight.recipes import get_recipe


def smoke(iterations: int = 2, **changes) -> Config:
    """tiny-smoke with validation at the end only."""
    cfg = get_recipe("tiny-smoke")
    return dataclasses.replace(cfg, num_iterations=iterations, val_every=1000, **changes)


def ray_options(**changes) -> RayOptions:
    base = dict(num_samplers=2, num_train_workers=1, trainer_threads=1, wandb=False)
    return RayOptions(**{**base, **changes})


def metrics_rows(run: Path) -> list[dict]:
    """A run folder's metrics rows."""
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x]


def group_noise(cfg: Config) -> Config:
    """``cfg`` with groups sharing their initial noise (``sampler.group_init_noise``)."""
    return dataclasses.replace(cfg, sampler=dataclasses.replace(cfg.sampler, group_init_noise=True))
