"""Flow-matching pretraining of the tiny policy on a task's ground-truth renders.

Sample ``i`` of a run is drawn from ``np.random.default_rng([seed, i])`` (prompt and render), so
the data stream is a function of the seed alone, whatever the number of loader workers. The
loss is the rectified-flow velocity MSE ``|v(x_t, t) - (eps - x0)|^2`` with
``x_t = (1 - t) x0 + t eps`` and logit-normal ``t``; a fraction of prompts is replaced by the
null prompt so classifier-free guidance is available later. Checkpoints hold the EMA weights.

A run is resumable: ``OUT/pretrain-state.pt`` (weights, EMA, optimizer, noise generator, step)
is committed at every checkpoint, every ``state_every_s`` seconds, at the end of a stage
(``stage_samples``) and on SIGINT/SIGTERM; the same command started again goes on from it, and
the result is bit-identical to a run that never stopped (the data is indexed by sample).

A run of another architecture may start warm (``warm_start``): the tensors of an older base
whose names and shapes match are copied into the random init before the first step.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from spotlight import interrupts, progress
from spotlight.policies.base import TextCond
from spotlight.policies.tiny import TinyConfig, TinyPolicy
from spotlight.tasks import Task, get_task

LOG_EVERY_STEPS = 100
PRECISIONS = ("float32", "bfloat16")
STATE_FILE = "pretrain-state.pt"
"""The resumable state of a run, in its output folder."""
ARCH_KEYS = ("patch", "num_layers", "num_heads", "head_dim", "text_dim")
"""The architecture fields a pretraining run may set (the rest come from the task)."""


def task_model_config(task: Task, **arch: int) -> TinyConfig:
    """The tiny architecture of a task's base model: the task's image size and channels, the
    default transformer unless ``arch`` (fields of :data:`ARCH_KEYS`) says otherwise."""
    unknown = sorted(set(arch) - set(ARCH_KEYS))
    if unknown:
        raise ValueError(f"unknown architecture field(s) {unknown}; known: {list(ARCH_KEYS)}")
    return TinyConfig(height=task.height, width=task.width, channels=task.channels, **arch)


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
    warm_start: str | None = None
    """Start from a random init of ``arch`` with every tensor whose name and shape match copied
    from this tiny-policy checkpoint of another architecture (for example the patch-4 base
    into a patch-2 model: all but the patch embedding and the output projection)."""
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
    """Data-loader processes rendering images (the data does not depend on them)."""
    arch: dict[str, int] = field(default_factory=dict)
    """Architecture fields (:data:`ARCH_KEYS`) that differ from the task's default model."""
    stage_samples: int = 0
    """Stop after this many more samples, the state committed (0 = run to the end); the same
    command goes on from there."""
    state_every_s: float = 600.0
    """Commit the resumable state at least this often (seconds)."""
    precision: str = "float32"
    """``bfloat16``: the forward and backward pass under ``torch.autocast`` in bfloat16 (matrix
    products in bfloat16; weights, EMA and optimizer stay float32). Fast only where the hardware
    has bfloat16 matrix instructions (a GPU, a CPU with AVX512-BF16 or AMX)."""

    def validate(self) -> None:
        task_model_config(get_task(self.task), **self.arch)
        if self.init and self.warm_start:
            raise ValueError("init and warm_start are exclusive: init loads the same architecture")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.stage_samples < 0 or self.state_every_s <= 0:
            raise ValueError("stage_samples must be >= 0 and state_every_s > 0")
        if self.num_samples < self.batch_size or self.batch_size < 1:
            raise ValueError(
                f"need num_samples >= batch_size >= 1, got {self.num_samples}, {self.batch_size}"
            )
        if not 0.0 <= self.p_uncond < 1.0 or not 0.0 <= self.ema_decay < 1.0:
            raise ValueError("p_uncond and ema_decay must be in [0, 1)")


class RenderedPrompts(Dataset):
    """Item i: (prompt, image in [-1, 1] as (C, H, W)) drawn from rng([seed, start + i]): the
    samples ``start..length-1`` of the stream."""

    def __init__(self, task: Task, seed: int, length: int, start: int = 0):
        self.task, self.seed, self.length, self.start = task, seed, length, start

    def __len__(self) -> int:
        return self.length - self.start

    def __getitem__(self, i: int) -> tuple[str, torch.Tensor]:
        rng = np.random.default_rng([self.seed, self.start + i])
        prompt = self.task.sample_prompt(rng)
        img = self.task.render(prompt, rng)
        x = torch.tensor(img, dtype=torch.float32).permute(2, 0, 1) / 127.5 - 1.0
        return prompt, x


def cpu_has_bfloat16(cpuinfo: str = "/proc/cpuinfo") -> bool | None:
    """Whether this CPU has bfloat16 matrix instructions (x86's ``avx512_bf16`` or
    ``amx_bf16``, Arm's ``bf16``), read from its flags; None where they cannot be read."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return None
    flags = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    if not flags:
        return None
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


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


RESULT_FIELDS = (
    *("task", "num_samples", "batch_size", "learning_rate", "warmup_steps", "ema_decay"),
    *("init", "warm_start", "p_uncond", "seed", "arch"),
)
"""The settings a run's weights depend on: a resumed run must have the same. The precision
changes the weights too, by rounding, but it may change from one stage to the next (a run moved
to a machine without fast bfloat16): the state and every checkpoint record which steps ran in
which (``precision_stages``)."""


def pretrain(
    cfg: PretrainConfig,
    out_dir: Path,
    device: str = "cpu",
    log: TextIO | None = None,
    save_dtype: torch.dtype = torch.float32,
) -> list[Path]:
    """Train a tiny policy on ``cfg.task``, from ``OUT/pretrain-state.pt`` when a run of the
    same settings left one; returns the checkpoint paths written by this call. A stage that
    ends before the last step (``stage_samples``) returns with the state committed."""
    cfg.validate()
    task = get_task(cfg.task)
    out_dir.mkdir(parents=True, exist_ok=True)
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True  # float32 weights, TF32 matrix products
    if cfg.precision == "bfloat16" and device == "cpu" and cpu_has_bfloat16() is False:
        _log(
            log,
            f"[pretrain {cfg.task}] warning: this CPU has no bfloat16 matrix instructions "
            "(avx512_bf16, amx_bf16): bfloat16 runs several times slower than float32 on it "
            "(--precision float32; a resumed run may change its precision)",
        )
    run = _Trainee.start(cfg, task_model_config(task, **cfg.arch), device)
    total_steps = cfg.num_samples // cfg.batch_size
    first, seconds_before, stages = _resume(out_dir, cfg, run, log)
    if cfg.warm_start and first == 0:
        kept = warm_start_from(run, cfg.warm_start)
        _log(log, f"[pretrain {cfg.task}] warm start from {cfg.warm_start}: {kept}")
    last = total_steps
    if cfg.stage_samples:
        last = min(total_steps, first + max(1, cfg.stage_samples // cfg.batch_size))
    if first >= total_steps:
        final = out_dir / f"{cfg.task}-{total_steps * cfg.batch_size}.safetensors"
        _log(log, f"[pretrain {cfg.task}] already done: {final}")
        return [final]
    loader = DataLoader(
        RenderedPrompts(task, cfg.seed, last * cfg.batch_size, start=first * cfg.batch_size),
        batch_size=cfg.batch_size,
        shuffle=False,
        num_workers=cfg.num_workers,
        pin_memory=device.startswith("cuda"),
        persistent_workers=cfg.num_workers > 0,
        worker_init_fn=_leave_signals_to_the_main_process,
    )
    save_at = {s // cfg.batch_size for s in cfg.checkpoint_at if s < cfg.num_samples}
    save_at.add(total_steps)
    written: list[Path] = []
    t_start, loss_sum = time.perf_counter(), torch.zeros((), device=device)
    last_save = last_state = t_start

    def commit(done: int) -> None:
        with interrupts.held():  # a signal meanwhile is raised once the state is whole
            seconds = seconds_before + time.perf_counter() - t_start
            _save_state(out_dir, cfg, done, run, seconds, stages)

    bar = progress.bar(log, f"pretrain {cfg.task}", last - first, unit="steps", every_s=None)
    done = first  # steps finished; a signal is raised only between steps
    batches = iter(loader)
    try:
        for step in range(first, last):
            with interrupts.held():
                # the batch is taken inside too: a signal raised while a worker hands its
                # tensors over left the worker a half-made connection and a traceback
                prompts, x0 = next(batches)
                loss_sum += run.step(cfg, step, total_steps, list(prompts), x0)
                done = step + 1
                now = time.perf_counter()
                if done % LOG_EVERY_STEPS == 0 or done == last:
                    # this line's window: the steps since the last line, or since the
                    # resume at `first` where that came later
                    window = done - max(first, step // LOG_EVERY_STEPS * LOG_EVERY_STEPS)
                    _log(
                        log,
                        f"[pretrain {cfg.task}] step {done}/{total_steps} samples "
                        f"{done * cfg.batch_size} loss {float(loss_sum) / window:.4f} "
                        f"{(done - first) * cfg.batch_size / (now - t_start):.0f} samples/s",
                    )
                    loss_sum.zero_()
                timed = cfg.checkpoint_every_s > 0 and now - last_save >= cfg.checkpoint_every_s
                if done in save_at or timed:
                    last_save = now
                    path = out_dir / f"{cfg.task}-{done * cfg.batch_size}.safetensors"
                    seconds = seconds_before + now - t_start
                    _save(run.ema, path, cfg, done * cfg.batch_size, seconds, save_dtype, stages)
                    written.append(path)
                    _log(log, f"[pretrain {cfg.task}] wrote {path}")
                if done in save_at or done == last or now - last_state >= cfg.state_every_s:
                    last_state = now
                    commit(done)
            bar.update(1)
    except interrupts.Interrupted as e:
        commit(done)
        e.line = (
            f"spotlight: interrupted ({e.name}); pretraining state kept at "
            f"{done * cfg.batch_size} of {total_steps * cfg.batch_size} samples in "
            f"{out_dir / STATE_FILE}: run the same command to go on"
        )
        raise
    finally:
        bar.close()
    if last < total_steps:
        _log(
            log,
            f"[pretrain {cfg.task}] stage done at {last * cfg.batch_size} of "
            f"{total_steps * cfg.batch_size} samples; run the same command to go on",
        )
    return written


@dataclass
class _Trainee:
    """What a pretraining run trains and carries from step to step."""

    policy: TinyPolicy
    ema: TinyPolicy
    opt: torch.optim.AdamW
    gen: torch.Generator

    @classmethod
    def start(cls, cfg: PretrainConfig, arch: TinyConfig, device: str) -> _Trainee:
        if cfg.init:
            policy = TinyPolicy.load(cfg.init, expect=arch).to(device)
        else:
            policy = TinyPolicy(arch, seed=cfg.seed).to(device)
        ema = copy.deepcopy(policy).requires_grad_(False)
        cuda = device.startswith("cuda")
        opt = torch.optim.AdamW(
            policy.parameters(), lr=cfg.learning_rate, weight_decay=0.0, fused=cuda
        )
        return cls(policy, ema, opt, torch.Generator(device=device).manual_seed(cfg.seed + 1))

    def step(self, cfg, step: int, total_steps: int, prompts: list[str], x0) -> torch.Tensor:
        """One optimizer step and EMA update; the loss (on the device, no host sync)."""
        for group in self.opt.param_groups:
            group["lr"] = cfg.learning_rate * _lr_factor(step, cfg.warmup_steps, total_steps)
        x0 = x0.to(self.gen.device, non_blocking=True)
        device_type = self.gen.device.type
        with torch.autocast(device_type, torch.bfloat16, enabled=cfg.precision == "bfloat16"):
            loss = _flow_loss(self.policy, prompts, x0, cfg, self.gen)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.policy.parameters(), 1.0)
        self.opt.step()
        _ema_update(self.ema, self.policy, min(cfg.ema_decay, (1 + step) / (10 + step)))
        return loss.detach()

    def state(self) -> dict:
        return {
            "policy": self.policy.state_dict(),
            "ema": self.ema.state_dict(),
            "optimizer": self.opt.state_dict(),
            "generator": self.gen.get_state(),
        }

    def load(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.ema.load_state_dict(state["ema"])
        self.opt.load_state_dict(state["optimizer"])
        self.gen.set_state(state["generator"])


def warm_start_from(run: _Trainee, path: str) -> str:
    """Copy into the run's weights (and EMA) every tensor of the checkpoint at ``path`` whose
    name and shape match; the rest keep their random init. Returns what it did, in words.

    Raises:
        ValueError: no tensor matches (the checkpoint is of another model altogether).
    """
    donor = TinyPolicy.load(path).state_dict()
    state = run.policy.state_dict()
    same = [k for k, v in donor.items() if k in state and state[k].shape == v.shape]
    if not same:
        raise ValueError(f"{path}: no tensor matches the model's names and shapes")
    state.update({k: donor[k].to(state[k].device, state[k].dtype) for k in same})
    run.policy.load_state_dict(state)
    run.ema.load_state_dict(state)
    fresh = sorted(set(state) - set(same))
    return f"{len(same)} of {len(state)} tensors copied; random: {', '.join(fresh) or 'none'}"


def _resume(
    out_dir: Path, cfg: PretrainConfig, run: _Trainee, log
) -> tuple[int, float, list[list]]:
    """Load ``OUT/pretrain-state.pt`` into the run if there is one; (first step, seconds so
    far, precision stages: ``[first step, precision]`` pairs, this run's last). A state of
    other settings is an error naming them."""
    path = out_dir / STATE_FILE
    if not path.exists():
        return 0, 0.0, [[0, cfg.precision]]
    state = torch.load(path, map_location="cpu", weights_only=True)
    saved = json.loads(state["config"])
    mine = dataclasses.asdict(cfg)
    defaults = dataclasses.asdict(PretrainConfig(task=cfg.task))  # a field added since
    differ = [k for k in RESULT_FIELDS if saved.get(k, defaults[k]) != mine[k]]
    if differ:
        raise ValueError(
            f"{path} is a run with other settings ({', '.join(differ)}: "
            f"{', '.join(f'{saved.get(k)!r} != {mine[k]!r}' for k in differ)}); "
            "use another --out or the same settings"
        )
    run.load(state)
    step = int(state["step"])
    # a state from before the stages were recorded ran in its config's precision throughout
    stages = json.loads(state.get("precision_stages", "null")) or [
        [0, saved.get("precision", defaults["precision"])]
    ]
    line = f"[pretrain {cfg.task}] resuming at {step * cfg.batch_size} samples from {path}"
    if stages[-1][1] != cfg.precision:
        line += f" in {cfg.precision} (steps {stages[-1][0]}-{step - 1} ran in {stages[-1][1]})"
        stages = [*stages, [step, cfg.precision]]
    _log(log, line)
    return step, float(state["seconds"]), stages


def _save_state(
    out_dir: Path,
    cfg: PretrainConfig,
    step: int,
    run: _Trainee,
    seconds: float,
    stages: list[list],
) -> None:
    """Commit the resumable state (written aside, then renamed over the old one)."""
    state = {
        "config": json.dumps(dataclasses.asdict(cfg)),
        "step": step,
        "seconds": seconds,
        "precision_stages": json.dumps(stages),
    }
    state.update(run.state())
    tmp = out_dir / (STATE_FILE + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, out_dir / STATE_FILE)


def _leave_signals_to_the_main_process(_worker_id: int) -> None:
    """A loader worker ignores SIGINT and SIGTERM: sent to the whole process group (Ctrl-C, a
    scheduler's stop, ``pkill -f``) they are the main process's to handle, which commits the
    state and then stops its workers. A worker killed first failed the run without a commit."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


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
    stages: list[list],
) -> None:
    meta = {
        "task": cfg.task,
        "pretrain_samples": str(samples),
        "pretrain_seed": str(cfg.seed),
        "pretrain_seconds": f"{seconds:.1f}",
        "pretrain_config": json.dumps(dataclasses.asdict(cfg)),
        "pretrain_precision_stages": json.dumps(stages),  # [first step, precision] pairs
    }
    ema.save(path, extra_metadata=meta, dtype=dtype)


def _log(log: TextIO | None, line: str) -> None:
    progress.line(log, line)
