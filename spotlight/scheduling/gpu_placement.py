"""Which role gets which GPUs of one machine: trainer workers, sampler replicas, the model reward.

``spotlight train --device cuda`` on a local Ray (no cluster) places its roles with
:func:`plan_gpus`: trainer workers on the first GPUs, one whole GPU each; sampler replicas on
the GPUs after them (``workers_per_replica`` whole GPUs each, the SP workers); a model reward
on a GPU of its own when one is left, else on the CPU. On a machine with a single GPU, one
sampler replica and one trainer worker share it: each asks Ray for :data:`SHARED_GPU` of it
(Ray's fractional GPUs), and both see GPU 0.

GPU memory is judged from the recipes' measured peaks (:data:`ROLE_MEMORY_GB`): a whole GPU
must hold its role's peak; a shared GPU both peaks together. A plan that cannot fit is refused
with one line naming the role, its flag and what the machine has.

Ray, not this plan, picks which physical GPU ids an actor gets; the plan fixes how many GPUs
each role takes and whether any two roles share one (:meth:`GpuPlan.ray_gpus` is what the job
asks Ray for). The GPU ids of :meth:`GpuPlan.layout` are the layout Ray's in-order assignment
gives on an idle machine, as the docs' placement table shows it.
"""

from __future__ import annotations

from dataclasses import dataclass

SHARED_GPU = 0.5
"""Ray GPU units each of the two roles sharing a single GPU asks for."""

ROLE_MEMORY_GB: dict[tuple[str, int], tuple[float, float]] = {
    ("qwen-image", 512): (62.6, 73.5),
    ("qwen-image", 1280): (64.1, 87.2),
}
"""Peak GPU memory (GB, 1e9 bytes) of a sampler replica and of a trainer worker, by policy and
image size: the Qwen-Image recipes at full size on one H200 (docs/benchmarks.md, "A Qwen-Image
recipe's code path on one H200": sampling a batch of 8 at 512 / 2 at 1280; an iteration's
peak, update included, at train batch 4 / 1 with gradient checkpointing). Both roles hold
the whole bf16 model (59.4 GB). Other policies (the tiny one) are not judged."""


@dataclass(frozen=True)
class GpuMachine:
    """The GPUs of the machine the job runs on."""

    num_gpus: int
    gpu_memory_gb: float | None = None
    """Memory of its smallest GPU; None where unknown (Ray's GPU resources on a machine
    without CUDA, as the tests start it): memory is then not judged."""


@dataclass(frozen=True)
class GpuAsk:
    """What the job asks for (``RayOptions``, resolved)."""

    num_train_workers: int
    num_samplers: int
    workers_per_replica: int = 1
    reward_gpus: float = 0.0
    """GPUs of the reward deployment (``RayOptions.scorer_gpus``): 0 puts it on the CPU."""
    reward_gpus_asked: bool = False
    """``--reward-gpus`` was given: a reward that cannot get its GPU is refused, not moved to
    the CPU."""
    memory_gb: tuple[float, float] | None = None
    """Peak GB of (sampler replica, trainer worker): :func:`role_memory`; None: not judged."""


@dataclass(frozen=True)
class GpuPlan:
    """Where each role runs: GPU ids of each trainer worker, sampler replica and the reward."""

    trainer: tuple[tuple[int, ...], ...]
    samplers: tuple[tuple[int, ...], ...]
    reward: tuple[int, ...]
    """Empty: the reward runs on the CPU."""
    shared: bool
    """One GPU holds a trainer worker and a sampler replica (fractional GPUs)."""
    num_gpus: int

    def ray_gpus(self) -> dict[str, float]:
        """Ray GPU units per ``trainer`` worker, per ``sampler`` GPU worker and for the
        ``reward``: what ``job/launch.py`` and the deployments ask Ray for."""
        per_role = SHARED_GPU if self.shared else 1.0
        return {
            "trainer": per_role,
            "sampler": per_role,
            "reward": float(len(self.reward)),
        }

    def idle_gpus(self) -> list[int]:
        used = {g for ids in (*self.trainer, *self.samplers, self.reward) for g in ids}
        return [g for g in range(self.num_gpus) if g not in used]

    def layout(self) -> str:
        """One line: which GPU ids each role has (the docs' placement table)."""

        def ids(groups) -> str:
            flat = [g for grp in groups for g in grp]
            return ",".join(map(str, flat)) if flat else "-"

        reward = ids([self.reward]) if self.reward else "CPU"
        share = f" (sharing GPU {self.trainer[0][0]})" if self.shared else ""
        idle = f"; idle GPUs {ids([self.idle_gpus()])}" if self.idle_gpus() else ""
        return (
            f"trainer workers on GPU {ids(self.trainer)}, sampler replicas on GPU"
            f" {ids(self.samplers)}{share}, reward on {'GPU ' + reward if self.reward else reward}"
            f"{idle}"
        )


def role_memory(policy: str, options: dict) -> tuple[float, float] | None:
    """Measured peak GB of (sampler replica, trainer worker) for a policy config, or None."""
    size = max(int(options.get("height", 512)), int(options.get("width", 512)))
    return ROLE_MEMORY_GB.get((policy, size))


def default_counts(num_gpus: int, reward_on_gpu: bool) -> tuple[int, int]:
    """``(train workers, sampler replicas)`` that fill ``num_gpus`` (the docs' table): one
    trainer worker per 4 GPUs (at least one), a reward GPU when asked and one is left after a
    replica, every other GPU a sampler replica; on one GPU, one of each sharing it."""
    if num_gpus < 1:
        raise ValueError(f"need at least one GPU, got {num_gpus}")
    if num_gpus == 1:
        return 1, 1
    trainers = max(1, num_gpus // 4)
    reward = 1 if reward_on_gpu and num_gpus - trainers >= 2 else 0
    return trainers, num_gpus - trainers - reward


def plan_gpus(machine: GpuMachine, ask: GpuAsk) -> GpuPlan:
    """Place ``ask`` on ``machine`` (see the module docstring).

    Raises:
        ValueError: one line naming the role and flag that cannot fit and what the machine has.
    """
    n, w = machine.num_gpus, ask.workers_per_replica
    has = f"this machine has {n} GPU{'s' if n != 1 else ''}"
    if n < 1:
        raise ValueError(f"--device cuda: {has}")
    if n == 1 and ask.num_train_workers == 1 and ask.num_samplers == 1 and w == 1:
        _check_memory(machine, ask, shared=True)
        reward = _reward_gpus(ask, 0, has)
        return GpuPlan(((0,),), ((0,),), reward, shared=True, num_gpus=1)
    need = ask.num_train_workers + ask.num_samplers * w
    if need > n:
        sharing = " (one GPU is shared only by --samplers 1 --train-workers 1)" if n == 1 else ""
        raise ValueError(
            f"--train-workers {ask.num_train_workers} and --samplers {ask.num_samplers} x {w}"
            f" GPU(s) each (--sp-workers) need {need} whole GPUs and {has}{sharing}"
        )
    _check_memory(machine, ask, shared=False)
    trainer = tuple((g,) for g in range(ask.num_train_workers))
    first = ask.num_train_workers
    samplers = tuple(
        tuple(range(first + r * w, first + (r + 1) * w)) for r in range(ask.num_samplers)
    )
    reward = _reward_gpus(ask, n - need, has, first=need)
    return GpuPlan(trainer, samplers, reward, shared=False, num_gpus=n)


def _reward_gpus(ask: GpuAsk, free: int, has: str, first: int = 0) -> tuple[int, ...]:
    """GPU ids of the reward: ``ceil(reward_gpus)`` whole GPUs from the ``free`` ones after
    ``first``; the CPU when none is asked, or when none is left and ``--reward-gpus`` was not
    given (the default only prefers a GPU)."""
    if ask.reward_gpus <= 0:
        return ()
    count = int(-(-ask.reward_gpus // 1))
    if count <= free:
        return tuple(range(first, first + count))
    if not ask.reward_gpus_asked:
        return ()
    raise ValueError(
        f"--reward-gpus {ask.reward_gpus:g}: no GPU is left for the reward after the trainer"
        f" workers and sampler replicas ({has}; --reward-gpus 0 scores on the CPU)"
    )


def _check_memory(machine: GpuMachine, ask: GpuAsk, shared: bool) -> None:
    """Refuse a role whose measured peak does not fit its GPU (both peaks on a shared one)."""
    if machine.gpu_memory_gb is None or ask.memory_gb is None:
        return
    sampler_gb, trainer_gb = ask.memory_gb
    gpu = f"this machine's GPUs have {machine.gpu_memory_gb:.1f} GB"
    if shared and sampler_gb + trainer_gb > machine.gpu_memory_gb:
        raise ValueError(
            f"one GPU shared by a sampler replica ({sampler_gb:g} GB) and a trainer worker"
            f" ({trainer_gb:g} GB) needs {sampler_gb + trainer_gb:.1f} GB and {gpu}"
            " (--device cuda on a single GPU; a machine with 2 GPUs gives each its own)"
        )
    for role, flag, gb in (
        ("sampler replica", "--samplers", sampler_gb),
        ("trainer worker", "--train-workers", trainer_gb),
    ):
        if gb > machine.gpu_memory_gb:
            raise ValueError(f"a {role} ({flag}) needs {gb:g} GB of GPU memory and {gpu}")


def process_group_backend(device: str) -> str:
    """The trainer's ``torch.distributed`` backend: NCCL on a CUDA device, gloo elsewhere."""
    return "nccl" if device.startswith("cuda") else "gloo"


def worker_device(device: str, gpu_ids: list, visible: str | None) -> str:
    """The torch device of a worker given ``device``: on CUDA the index, among its visible
    devices (``CUDA_VISIBLE_DEVICES``, ``visible``), of the first GPU Ray assigned it
    (``ray.get_gpu_ids()``). Ray Train shows each trainer worker all the trainer's GPUs of its
    node (NCCL wants them), so plain ``cuda`` would put every worker on the first.

    Raises:
        ValueError: a CUDA device for a worker Ray assigned no GPU, or one it cannot see.
    """
    if device != "cuda":
        return device
    if not gpu_ids:
        raise ValueError("--device cuda: this worker was assigned no GPU by Ray")
    shown = [v.strip() for v in (visible or "").split(",") if v.strip()]
    first = str(gpu_ids[0])
    if first not in shown:
        raise ValueError(f"GPU {first} assigned by Ray is not in CUDA_VISIBLE_DEVICES={visible}")
    return f"cuda:{shown.index(first)}"
