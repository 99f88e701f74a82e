"""Helpers of the Ray tests: small configs and options."""

from __future__ import annotations

import dataclasses

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
