"""Can this machine run the job? Its cores and memory against what each role takes.

On a local Ray (``spotlight train`` without ``RAY_ADDRESS``) every role runs on the machine the
command runs on. Ray itself would start whatever it is asked to (the embedded Ray's resources
are virtual): 64 trainer workers on 2 cores and 24 GB started about 70 worker processes and
waited for them for minutes. So before the run folder is written or Ray starts, the job's roles
(:func:`spotlight.scheduling.capacity.job_roles`'s, in the units of this machine) are held
against what the machine has, with the same whole-units count (``units_per_node``), and a job
that cannot fit is refused in one line naming the role, its flag and what the machine has.

What a role takes:

- memory: the resident memory measured per process of the default run (``tiny-ocr``, a soak
  of docs/benchmarks.md, ``docs/bench/soak-quiet-calls.json`` at iteration 20): a lower bound,
  as bigger models take more. The roles share the machine's memory with Ray's own processes,
  the driver and the detached actors (``BASE_MEMORY_GB``).
- cores: a data-parallel trainer worker steps with the others (an all-reduce each step), so
  each needs a core of its own; the sampler and reward replicas run at idle priority on what
  is left and need none.
- GPUs (``--device cuda``): placed by the GPU plan (:mod:`spotlight.scheduling.gpu_placement`,
  checked by ``spotlight.job.placement.local_gpu_plan`` right after this check), which may share
  one GPU between a replica and a trainer worker; here only a machine whose torch sees no CUDA
  GPU is refused (:func:`check_device`).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from spotlight.scheduling.capacity import Role, units_per_node

REPLICA_MEMORY_GB = 0.74
"""A sampler replica (one GPU worker, the tiny model loaded): soak, iteration 20, 0.74 GB RSS."""
TRAINER_MEMORY_GB = 1.76
"""A Ray Train worker (policy, optimizer, reference): soak, iteration 20, 1.76 GB RSS."""
REWARD_MEMORY_GB = 0.44
"""The reward replica (Tesseract in process): soak, iteration 20, 0.44 GB RSS."""
BASE_MEMORY_GB = 3.1
"""Everything else of a run on a local Ray (GCS, raylet, dashboard, Serve and Train
controllers, the three detached actors, the driver): the soak's other processes at iteration
20, 3.1 GB RSS in all."""

CPU, MEMORY_GB = "CPU", "memory_gb"
"""What a machine offers, in the units :class:`Role` asks for them."""


@dataclass(frozen=True)
class Machine:
    """What the machine the job runs on has."""

    cores: int
    memory_gb: float

    def offer(self) -> dict[str, float]:
        return {CPU: float(self.cores), MEMORY_GB: self.memory_gb}


def machine_roles(train_workers: int, samplers: int, workers_per_replica: int) -> list[Role]:
    """The job's roles in this machine's units (see the module docstring)."""
    trainer = {CPU: 1.0, MEMORY_GB: TRAINER_MEMORY_GB}
    replica = {MEMORY_GB: REPLICA_MEMORY_GB * workers_per_replica}
    reward = {MEMORY_GB: REWARD_MEMORY_GB}
    return [
        Role("trainer worker", train_workers, trainer, "--train-workers"),
        Role("sampler replica", samplers, replica, "--samplers"),
        Role("reward replica", 1, reward, "--reward-gpus"),
    ]


def machine_shortfalls(
    machine: Machine, roles: list[Role], base_memory_gb: float = BASE_MEMORY_GB
) -> list[str]:
    """One sentence per role this machine cannot hold (empty: the job fits).

    The roles share the machine. A role is blamed when it does not fit beside ``base_memory_gb``
    and one unit of each other role (``units_per_node`` of what is left is below its count);
    when each fits that way but all of them together do not, every role is named."""
    offer = machine.offer()
    offer[MEMORY_GB] -= base_memory_gb
    out = []
    for role in roles:
        others = [dataclasses.replace(r, count=min(r.count, 1)) for r in roles if r is not role]
        most = units_per_node(_left(offer, others), role.per_unit)
        if most < role.count:
            out.append(_sentence(role, most, machine))
    if not out and any(v < 0 for v in _left(offer, roles, clip=False).values()):
        out = [_sentence(r, None, machine) for r in roles if r.count > 0]
    return out


def _left(offer: dict[str, float], roles: list[Role], clip: bool = True) -> dict[str, float]:
    """What ``offer`` has left once ``roles`` have all they ask for."""
    left = dict(offer)
    for r in roles:
        for k, v in r.per_unit.items():
            left[k] = left.get(k, 0.0) - v * r.count
    return {k: max(0.0, v) for k, v in left.items()} if clip else left


def _sentence(role: Role, most: int | None, machine: Machine) -> str:
    """``role`` does not fit: what it needs, what the machine has, how many would fit
    (``most``; None: each fits, not all together)."""
    need = []
    if role.per_unit.get(CPU):
        need.append(f"{role.per_unit[CPU]:g} core")
    need.append(f"{role.per_unit.get(MEMORY_GB, 0.0):.2f} GB")
    has = f"{machine.cores} core{'s' if machine.cores != 1 else ''}"
    has += f" and {machine.memory_gb:.1f} GB"
    room = (
        f"room for {most} beside Ray ({BASE_MEMORY_GB:g} GB) and the other roles"
        if most is not None
        else "not for all the roles together"
    )
    one = role.count == 1
    return (
        f"{role.count} {role.name}{'' if one else 's'} ({role.flag}) need{'s' if one else ''}"
        f" {' and '.join(need)} each; this machine has {has}, {room}"
    )


def device_problem(device: str, cuda_gpus: int) -> str | None:
    """Why ``--device`` cannot run here (None: it can): a device other than ``cpu``, ``cuda``
    or ``cuda:N``, or CUDA on a machine whose torch sees fewer GPUs."""
    kind, _, index = device.partition(":")
    if kind == "cpu" and not index:
        return None
    if kind != "cuda" or (index and not index.isdigit()):
        return f"--device {device}: not a device spotlight runs on (cpu, cuda or cuda:N)"
    if cuda_gpus == 0:
        return (
            f"--device {device}: this machine has no CUDA GPU (torch sees none); use --device cpu"
        )
    if index and int(index) >= cuda_gpus:
        return (
            f"--device {device}: this machine has {cuda_gpus} CUDA GPU(s), cuda:0..{cuda_gpus - 1}"
        )
    return None


def memory_limit_gb(meminfo: str, cgroup_max: str | None) -> float:
    """The memory a process here may use, in GB: ``/proc/meminfo``'s MemTotal, or the cgroup's
    ``memory.max`` where that is lower (a container)."""
    total_kb = next(
        int(line.split()[1]) for line in meminfo.splitlines() if line.startswith("MemTotal:")
    )
    total = total_kb * 1024
    if cgroup_max is not None and cgroup_max.strip().isdigit():
        total = min(total, int(cgroup_max.strip()))
    return total / 1e9


def this_machine() -> Machine:
    """The cores this process may run on and the memory it may use."""
    cgroup = Path("/sys/fs/cgroup/memory.max")
    memory = memory_limit_gb(
        Path("/proc/meminfo").read_text(), cgroup.read_text() if cgroup.is_file() else None
    )
    return Machine(cores=len(os.sched_getaffinity(0)), memory_gb=memory)


def check_device(device: str) -> None:
    """Refuse a ``--device`` this machine cannot run (the CLI exits 2); torch is imported only
    to count CUDA GPUs."""
    cuda_gpus = 0
    if device.startswith("cuda"):
        import torch

        cuda_gpus = torch.cuda.device_count()
    problem = device_problem(device, cuda_gpus)
    if problem is not None:
        raise ValueError(problem)


def check_machine(
    train_workers: int,
    samplers: int,
    workers_per_replica: int,
    device: str,
    machine: Machine | None = None,
) -> None:
    """Refuse a job this machine cannot hold (the CLI exits 2), in one line.

    Raises:
        ValueError: naming each role that does not fit, its flag and what the machine has.
    """
    if machine is None:
        check_device(device)
        machine = this_machine()
    roles = machine_roles(train_workers, samplers, workers_per_replica)
    missing = machine_shortfalls(machine, roles)
    if missing:
        raise ValueError(f"this machine cannot run the job on a local Ray: {'; '.join(missing)}")
