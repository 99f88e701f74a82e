"""Sampling one work item: the part every sampler shares.

Two places sample the queue's items: the sampler replicas (deployments/sampler.py) and the
trainer's GPUs while they wait for the rollout (job/trainer_sampling.py). Both do the same
thing, written once here: an item's trajectories start from its seeds or resume from its
checkpoint (:func:`start_item`), advance one step at a time, commit their state every
``commit_every`` steps and stop early when asked (:func:`run_item`), and the finished item
becomes an :class:`~spotlight.scheduling.work_queue.ItemResult` (:func:`item_result`). The
caller brings what differs: how one step runs (in its own process or on an SP group), where a
commit goes (the queue actor) and when to stop (a preemption notice, a graceful stop).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from spotlight.config import SamplerConfig
from spotlight.flow.sampler import Trajectory, start_trajectory
from spotlight.scheduling.work_queue import ItemCheckpoint, ItemResult, Kind, WorkItem

Step = Callable[[list[Trajectory]], list[Trajectory]]
"""One denoising step on every trajectory of an item; returns the trajectories after it."""


def start_item(
    item: WorkItem, latent_shape: tuple[int, ...], sampler: SamplerConfig
) -> list[Trajectory]:
    """The item's trajectories: from its checkpoint when it was interrupted, else from its
    seeds (drawn with the item's weights version; the initial noise from its init seeds when it
    has them)."""
    if item.resume is not None:
        return [Trajectory.from_bytes(b) for b in item.resume.trajectories]
    init = item.init_seeds or (None,) * len(item.seeds)
    return [
        start_trajectory(p, s, latent_shape, sampler, item.weights_version, i)
        for p, s, i in zip(item.prompts, item.seeds, init, strict=True)
    ]


def checkpoint(trajectories: Sequence[Trajectory]) -> ItemCheckpoint:
    """The item's in-flight state: every trajectory, at their (common) current step."""
    return ItemCheckpoint(trajectories[0].step, tuple(t.to_bytes() for t in trajectories))


def run_item(
    trajectories: list[Trajectory],
    step: Step,
    commit_every: int = 0,
    commit: Callable[[ItemCheckpoint], Any] | None = None,
    stop: Callable[[], bool] | None = None,
) -> tuple[list[Trajectory], bool]:
    """Advance ``trajectories`` to the end one ``step`` at a time.

    Every ``commit_every`` steps (0: never) the state goes to ``commit``, except at the end:
    a finished item is completed, not committed. ``stop`` is asked before each step; when it
    says stop, the trajectories are returned as they are. Returns ``(trajectories, finished)``.
    """
    while not trajectories[0].done:
        if stop is not None and stop():
            return trajectories, False
        trajectories = step(trajectories)
        at = trajectories[0].step
        if commit_every and at % commit_every == 0 and not trajectories[0].done:
            commit(checkpoint(trajectories))
    return trajectories, True


def item_result(
    item: WorkItem,
    trajectories: Sequence[Trajectory],
    rewards: Sequence[float],
    *,
    worker_id: str,
    pool: str,
    busy_s: float,
    resumed_from_step: int,
    sp_degree: int = 1,
    weights_load_s: float = 0.0,
    images: Any = None,
) -> ItemResult:
    """The finished item's result. Validation items need only their rewards: they carry no
    trajectories, and their images instead (for W&B); other items carry their trajectories
    (the update replays them) and no images."""
    keep = item.kind != Kind.VAL
    return ItemResult(
        item_id=item.item_id,
        worker_id=worker_id,
        pool=pool,
        rewards=[float(r) for r in rewards],
        trajectories=[t.to_bytes() for t in trajectories] if keep else [],
        busy_s=busy_s,
        resumed_from_step=resumed_from_step,
        sp_degree=sp_degree,
        weights_load_s=weights_load_s,
        images=None if keep else images,
    )
