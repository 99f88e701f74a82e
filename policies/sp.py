"""Ulysses sequence parallelism for the Qwen-Image transformer, on GPUs and on CPUs.

diffusers (0.42) runs Ulysses context parallelism for ``QwenImageTransformer2DModel``
(``enable_parallelism(config=ContextParallelConfig(ulysses_degree=d))``: the sequence is split
across the group, attention heads are exchanged with all-to-all). Its setup builds the device
mesh from the accelerator and picks the device as ``rank % accelerator count``, which fails on a
CPU machine (no accelerator: a division by zero). :func:`enable_ulysses` does that one step
itself, with the current process group's backend device (``cpu`` with gloo, ``cuda`` with
NCCL), and leaves the rest to diffusers, so the same code runs on both.

The caller has initialised ``torch.distributed`` with the group (all its ranks run the same
forward on the same inputs; each gets the full output). ``degree`` must divide the head count.
"""

from __future__ import annotations

import types

import torch
import torch.distributed as dist


def enable_ulysses(transformer: torch.nn.Module, degree: int) -> None:
    """Turn on Ulysses SP of ``degree`` (the process group's world size) for ``transformer``.
    The caller has checked that ``degree`` divides the head count
    (``spotlight.sp.sp_groups.check_degree``, which names the valid degrees)."""
    from diffusers.models._modeling_parallel import ContextParallelConfig, ParallelConfig

    if not dist.is_initialized():
        raise RuntimeError("initialise torch.distributed with the SP group first")
    if dist.get_world_size() != degree:
        raise ValueError(f"SP degree {degree} but the process group has {dist.get_world_size()}")
    device_type = "cuda" if dist.get_backend() == "nccl" else "cpu"

    def resolve(self, config):  # diffusers' _resolve_parallel_config, with our device
        if isinstance(config, ContextParallelConfig):
            config = ParallelConfig(context_parallel_config=config)
        cp = config.context_parallel_config
        mesh = cp.mesh or dist.device_mesh.init_device_mesh(
            device_type, mesh_shape=cp.mesh_shape, mesh_dim_names=cp.mesh_dim_names
        )
        rank = dist.get_rank()
        device = torch.device(device_type, rank % max(1, torch.accelerator.device_count()))
        if device_type == "cpu":
            device = torch.device("cpu")
        config.setup(rank, dist.get_world_size(), device, mesh=mesh)
        self._parallel_config = config
        return config

    transformer._resolve_parallel_config = types.MethodType(resolve, transformer)
    transformer.enable_parallelism(config=ContextParallelConfig(ulysses_degree=degree))
