"""Weights & Biases logging for the Ray job (driver side), offline unless configured.

W&B runs offline (files under ``<out>/wandb``, sync later with ``wandb sync``) unless
``WANDB_MODE`` or ``WANDB_API_KEY`` is set; ``WANDB_MODE=disabled`` or ``--no-wandb`` turns it
off. It logs every metrics row (rewards, cost, utilization, weights version) and, at validation
points, a few sample images with their prompts and seeds.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from spotlight.config import Config


class Tracker:
    def __init__(self, cfg: Config, out_dir: Path, enabled: bool = True, resume: bool = False):
        self._run = None
        if not enabled or os.environ.get("WANDB_MODE") == "disabled":
            return
        import wandb

        mode = os.environ.get("WANDB_MODE") or (
            "online" if os.environ.get("WANDB_API_KEY") else "offline"
        )
        self._run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "spotlight"),
            name=out_dir.name,
            id=_run_id(out_dir),
            resume="allow" if resume else None,
            dir=str(out_dir),
            mode=mode,
            config=cfg.to_dict(),
            settings=wandb.Settings(silent=True, console="off", x_disable_stats=True),
        )

    @property
    def enabled(self) -> bool:
        return self._run is not None

    def log(self, row: dict[str, Any]) -> None:
        if self._run is None:
            return
        flat = {k: v for k, v in row.items() if isinstance(v, int | float)}
        self._run.log(flat, step=int(row.get("iteration", -1)) + 1)

    def log_images(self, images, prompts: list[str], seeds: list[int], step: int) -> None:
        if self._run is None or images is None:
            return
        import wandb

        self._run.log(
            {
                "samples": [
                    wandb.Image(np.asarray(img).squeeze(), caption=f"{p} (seed {s})")
                    for img, p, s in zip(images, prompts, seeds, strict=True)
                ]
            },
            step=step,
        )

    def finish(self, summary: dict[str, Any]) -> None:
        if self._run is None:
            return
        for k, v in summary.items():
            if isinstance(v, int | float | str):
                self._run.summary[k] = v
        self._run.finish()


def _run_id(out_dir: Path) -> str:
    import hashlib

    return hashlib.sha256(str(out_dir.resolve()).encode()).hexdigest()[:12]
