"""Weights & Biases logging for the Ray job (driver side), offline unless configured.

W&B runs offline (files under ``<out>/wandb``, sync later with ``wandb sync``) unless
``WANDB_MODE`` is set or a key is there: ``WANDB_API_KEY`` or the ``api.wandb.ai`` entry that
``wandb login`` writes to ``~/.netrc``; ``WANDB_MODE=disabled`` or ``--no-wandb`` turns it off.
It logs every metrics row, its numbers grouped by :func:`wandb_key` (``train/``, ``val/``,
``cost/``, ``explore/``, ``faults/``, ``time/``, ``loss/``), and, at validation points, a few
sample images with their prompts and seeds.
"""

from __future__ import annotations

import netrc
import os
from pathlib import Path
from typing import Any

import numpy as np

from spotlight.config import Config
from spotlight.training.run_folder import FAULT_COUNTERS


class Tracker:
    def __init__(self, cfg: Config, out_dir: Path, enabled: bool = True, resume: bool = False):
        self._run = None
        if not enabled or os.environ.get("WANDB_MODE") == "disabled":
            return
        import wandb

        mode = os.environ.get("WANDB_MODE") or ("online" if has_wandb_key() else "offline")
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

    @property
    def url(self) -> str | None:
        """The run's page (None offline or disabled: asking an offline run for it prints a
        W&B warning)."""
        if self._run is None or getattr(self._run, "offline", False):
            return None
        return getattr(self._run, "url", None)

    def log(self, row: dict[str, Any]) -> None:
        if self._run is None:
            return
        flat = {wandb_key(k): v for k, v in row.items() if isinstance(v, int | float)}
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


def wandb_key(metric: str) -> str:
    """The W&B name of a ``metrics.jsonl`` field: grouped by what it measures, the field's own
    name after the group (``val_reward`` -> ``val/val_reward``), so a panel per group and the
    JSON lines name the same thing."""
    if "/" in metric:  # already grouped: loss/*
        return metric
    if metric.startswith("val_"):
        group = "val"
    elif metric in FAULT_COUNTERS:
        group = "faults"
    elif metric.startswith(("cost_", "gpu_s_", "busy_gpu_s_", "util_")):
        group = "cost"
    elif metric.startswith(("explore", "seeds_explored", "rank_spearman")):
        group = "explore"
    elif metric.endswith("_s") or metric.endswith("_s_max"):
        group = "time"
    else:
        group = "train"
    return f"{group}/{metric}"


def has_wandb_key() -> bool:
    """A W&B key is there: ``WANDB_API_KEY``, or ``wandb login``'s entry in ``~/.netrc``
    (``NETRC`` names another file)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def _run_id(out_dir: Path) -> str:
    import hashlib

    return hashlib.sha256(str(out_dir.resolve()).encode()).hexdigest()[:12]
