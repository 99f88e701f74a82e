"""Flow-matching pretraining of the tiny policy on a task's ground-truth renders.

Sample ``i`` of a run is drawn from ``np.random.default_rng([seed, i])`` (prompt and render), so
the data stream is a function of the seed alone, whatever the number of loader workers. The
loss is the rectified-flow velocity MSE ``|v(x_t, t) - (eps - x0)|^2`` with
``x_t = (1 - t) x0 + t eps`` and logit-normal ``t``; a fraction of prompts is replaced by the
null prompt so classifier-free guidance is available later. Checkpoints hold the EMA weights.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from spotlight import progress
from spotlight.policies.base import TextCond
from spotlight.policies.tiny import TinyConfig, TinyPolicy
from spotlight.tasks import Task, get_task

LOG_EVERY_STEPS = 100


def task_model_config(task: Task) -> TinyConfig:
    """The tiny architecture used for a task's base model (its image size and channels)."""
    return TinyConfig(height=task.height, width=task.width, channels=task.channels)


@dataclass(frozen=True)
class PretrainConfig:
    """Pretraining settings."""

    task: str
    """Task whose renders are the data ('ocr-mini' or 'geneval-mini')."""
    num_samples: int = 1_000_000
    """Training samples in total (steps = num_samples / batch_size)."""
    batch_size: int = 256
    """Samples per optimizer step."""
    learning_rate: float = 1e-3
    """Peak AdamW learning rate (linear warm-up, cosine decay to 10%)."""
    warmup_steps: int = 200
    """Linear warm-up steps."""
    ema_decay: float = 0.999
    """EMA of the weights; checkpoints hold the EMA. The decay warms up as
    ``min(ema_decay, (1 + step) / (10 + step))`` so short runs do not keep the random init."""
    init: str | None = None
    """Start from this tiny-policy checkpoint (same architecture) instead of a random init."""
    p_uncond: float = 0.1
    """Probability of replacing a prompt by the null prompt (for classifier-free guidance)."""
    seed: int = 0
    """Seeds the model init, the data stream and the noise."""
    checkpoint_at: tuple[int, ...] = field(default_factory=tuple)
    """Sample counts at which to save a checkpoint besides the last."""
    checkpoint_every_s: float = 0.0
    """Also save whenever this many seconds passed since the last save (0 = off); for runs
    under a wall-clock limit. Each file records its sample count."""
    num_workers: int = 2
    """Data-loader processes rendering images."""

    def validate(self) -> None:
        get_task(self.task)
        if self.num_samples < self.batch_size or self.batch_size < 1:
            raise ValueError(
                f"need num_samples >= batch_size >= 1, got {self.num_samples}, {self.batch_size}"
            )
        if not 0.0 <= self.p_uncond < 1.0 or not 0.0 <= self.ema_decay < 1.0:
            raise ValueError("p_uncond and ema_decay must be in [0, 1)")


class RenderedPrompts(Dataset):
    """Item i: (prompt, image in [-1, 1] as (C, H, W)) drawn from rng([seed, i])."""

    def __init__(self, task: Task, seed: int, length: int):
        self.task, self.seed, self.length = task, seed, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[str, torch.Tensor]:
        rng = np.random.default_rng([self.seed, i])
        prompt = self.task.sample_prompt(rng)
        img = self.task.render(prompt, rng)
        x = torch.tensor(img, dtype=torch.float32).permute(2, 0, 1) / 127.5 - 1.0
        return prompt, x


def _lr_factor(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    done = (step - warmup) / max(1, total - warmup)
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, done)))


def _conditioning(policy: TinyPolicy, prompts: list[str], drop: torch.Tensor) -> TextCond:
    cond = policy.encode_prompts(prompts)
    null = policy.null_cond(len(prompts))
    keep = ~drop.to(cond.embeds.device)
    return TextCond(
        torch.where(keep[:, None, None], cond.embeds, null.embeds),
        torch.where(keep[:, None], cond.mask, null.mask),
    )


def pretrain(
    cfg: PretrainConfig,
    out_dir: Path,
    device: str = "cpu",
    log: TextIO | None = None,
    save_dtype: torch.dtype = torch.float32,
) -> list[Path]:
    """Train a tiny policy from scratch on ``cfg.task``; returns the checkpoint paths written."""
    cfg.validate()
    task = get_task(cfg.task)
    out_dir.mkdir(parents=True, exist_ok=True)
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True  # float32 weights, TF32 matrix products
    arch = task_model_config(task)
    if cfg.init:
        policy = TinyPolicy.load(cfg.init, expect=arch).to(device)
    else:
        policy = TinyPolicy(arch, seed=cfg.seed).to(device)
    ema = copy.deepcopy(policy).requires_grad_(False)
    opt = torch.optim.AdamW(
        policy.parameters(), lr=cfg.learning_rate, weight_decay=0.0, fused=device.startswith("cuda")
    )
    total_steps = cfg.num_samples // cfg.batch_size
    loader = DataLoader(
        RenderedPrompts(task, cfg.seed, total_steps * cfg.batch_size),
        batch_size=cfg.batch_size,
        shuffle=False,
        num_workers=cfg.num_workers,
        pin_memory=device.startswith("cuda"),
        persistent_workers=cfg.num_workers > 0,
    )
    gen = torch.Generator(device=device).manual_seed(cfg.seed + 1)
    save_at = {s // cfg.batch_size for s in cfg.checkpoint_at if s < cfg.num_samples}
    save_at.add(total_steps)
    written: list[Path] = []
    t_start, loss_sum = time.perf_counter(), torch.zeros((), device=device)
    last_save = t_start
    bar = progress.bar(log, f"pretrain {cfg.task}", total_steps, unit="steps", every_s=None)
    for step, (prompts, x0) in enumerate(loader):
        for group in opt.param_groups:
            group["lr"] = cfg.learning_rate * _lr_factor(step, cfg.warmup_steps, total_steps)
        loss = _flow_loss(policy, list(prompts), x0.to(device, non_blocking=True), cfg, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt.step()
        _ema_update(ema, policy, min(cfg.ema_decay, (1 + step) / (10 + step)))
        loss_sum += loss.detach()  # summed on the device: no host sync per step
        if (step + 1) % LOG_EVERY_STEPS == 0 or step + 1 == total_steps:
            seen = (step + 1) * cfg.batch_size
            rate = seen / (time.perf_counter() - t_start)
            window = step % LOG_EVERY_STEPS + 1
            _log(
                log,
                f"[pretrain {cfg.task}] step {step + 1}/{total_steps} samples {seen} "
                f"loss {float(loss_sum) / window:.4f} {rate:.0f} samples/s",
            )
            loss_sum.zero_()
        timed = cfg.checkpoint_every_s > 0 and time.perf_counter() - last_save >= (
            cfg.checkpoint_every_s
        )
        if step + 1 in save_at or timed:
            last_save = time.perf_counter()
            path = out_dir / f"{cfg.task}-{(step + 1) * cfg.batch_size}.safetensors"
            _save(
                ema,
                path,
                cfg,
                (step + 1) * cfg.batch_size,
                time.perf_counter() - t_start,
                save_dtype,
            )
            written.append(path)
            _log(log, f"[pretrain {cfg.task}] wrote {path}")
        bar.update(1)
    bar.close()
    return written


def _flow_loss(
    policy: TinyPolicy,
    prompts: list[str],
    x0: torch.Tensor,
    cfg: PretrainConfig,
    gen: torch.Generator,
) -> torch.Tensor:
    b = x0.shape[0]
    t = torch.sigmoid(torch.randn(b, device=x0.device, generator=gen))
    eps = torch.randn(x0.shape, device=x0.device, generator=gen)
    drop = torch.rand(b, device=x0.device, generator=gen) < cfg.p_uncond
    tb = t.view(b, 1, 1, 1)
    x_t = (1.0 - tb) * x0 + tb * eps
    v = policy.velocity(x_t, t, _conditioning(policy, prompts, drop))
    return torch.nn.functional.mse_loss(v, eps - x0)


@torch.no_grad()
def _ema_update(ema: TinyPolicy, policy: TinyPolicy, decay: float) -> None:
    torch._foreach_lerp_(list(ema.parameters()), list(policy.parameters()), 1.0 - decay)


def _save(
    ema: TinyPolicy,
    path: Path,
    cfg: PretrainConfig,
    samples: int,
    seconds: float,
    dtype: torch.dtype,
) -> None:
    meta = {
        "task": cfg.task,
        "pretrain_samples": str(samples),
        "pretrain_seed": str(cfg.seed),
        "pretrain_seconds": f"{seconds:.1f}",
        "pretrain_config": json.dumps(dataclasses.asdict(cfg)),
    }
    ema.save(path, extra_metadata=meta, dtype=dtype)


def _log(log: TextIO | None, line: str) -> None:
    progress.line(log, line)
