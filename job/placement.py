"""The GPU placement of a ``--device cuda`` run on one machine: this machine's GPUs, read with
torch, placed by :func:`spotlight.scheduling.gpu_placement.plan_gpus` before Ray starts."""

from __future__ import annotations

import os
from typing import TextIO

from spotlight import progress
from spotlight.config import Config
from spotlight.job.options import RayOptions
from spotlight.scheduling.gpu_placement import (
    GpuAsk,
    GpuMachine,
    GpuPlan,
    plan_gpus,
    role_memory,
)


def cuda_machine() -> GpuMachine:
    """This machine's CUDA GPUs (0 without CUDA) and the memory of its smallest."""
    import torch

    if not torch.cuda.is_available():
        return GpuMachine(0)
    count = torch.cuda.device_count()
    memory = min(torch.cuda.get_device_properties(i).total_memory for i in range(count))
    return GpuMachine(count, memory / 1e9)


def gpu_ask(cfg: Config, opts: RayOptions) -> GpuAsk:
    """What the run asks for, in the plan's terms."""
    return GpuAsk(
        num_train_workers=opts.num_train_workers,
        num_samplers=opts.num_samplers,
        workers_per_replica=opts.workers_per_replica,
        reward_gpus=opts.scorer_gpus(cfg.reward),
        reward_gpus_asked=opts.reward_gpus is not None,
        memory_gb=role_memory(cfg.policy.name, cfg.policy.options),
    )


def local_gpu_plan(
    cfg: Config, opts: RayOptions, machine: GpuMachine | None = None, log: TextIO | None = None
) -> GpuPlan | None:
    """The plan of a ``--device cuda`` run on a local Ray (None on the CPU, or when the job
    joins a cluster: its node types place the roles, one whole GPU each). Raises ValueError
    (the CLI exits 2) for what cannot fit."""
    if not opts.device.startswith("cuda") or opts.address or os.environ.get("RAY_ADDRESS"):
        return None
    plan = plan_gpus(machine or cuda_machine(), gpu_ask(cfg, opts))
    progress.line(log, f"[spotlight] GPU placement: {plan.layout()}")
    return plan
