"""Pull versus push dispatch of work items, in simulated time, without Ray.

:func:`pull_schedule` runs the real :class:`~spotlight.scheduling.work_queue.WorkQueue` against
replicas of given speeds: each replica pulls one item whenever it is idle, so fast replicas take
more items and rollout items are served before exploration items. :func:`round_robin_schedule` is
the static alternative (item ``i`` goes to replica ``i mod R`` up front, as a push scheduler that
ignores speed would do). Both return when each item finished; the makespan benchmark
(benchmarks/preemption.py) uses them. The simulator dispatches on its own cluster, with
preemptions and SP groups (``spotlight.sim.sim_sampling``), by the same queue rules.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from spotlight.scheduling.work_queue import ItemResult, Pool, WorkItem, WorkQueue


@dataclass(frozen=True)
class Schedule:
    finish_s: dict[str, float]
    """Item id -> the time it finished."""
    worker_items: list[int]
    """How many items each replica ran."""

    @property
    def makespan_s(self) -> float:
        return max(self.finish_s.values(), default=0.0)

    def makespan_of(self, kind_prefix: str) -> float:
        return max((t for i, t in self.finish_s.items() if i.startswith(kind_prefix)), default=0.0)


def _check(items: list[WorkItem], cost_s: dict[str, float], speeds: list[float]) -> None:
    if not speeds or any(s <= 0 for s in speeds):
        raise ValueError(f"need at least one replica, every speed > 0 (got {speeds})")
    missing = [it.item_id for it in items if it.item_id not in cost_s]
    if missing:
        raise ValueError(f"no cost for items {missing[:3]}")


def pull_schedule(items: list[WorkItem], cost_s: dict[str, float], speeds: list[float]) -> Schedule:
    """Replicas (``speeds``: work per second, 1 = nominal) pull one item at a time from a real
    WorkQueue; an item takes ``cost_s[id] / speed``."""
    _check(items, cost_s, speeds)
    q = WorkQueue(lease_s=1e12)
    q.submit(items, now=0.0)
    idle = [(0.0, r) for r in range(len(speeds))]  # (free at, replica)
    heapq.heapify(idle)
    finish: dict[str, float] = {}
    counts = [0] * len(speeds)
    while idle:
        now, r = heapq.heappop(idle)
        got = q.pull(f"r{r}", 1, now)
        if not got:
            continue  # nothing left for this replica
        item = got[0]
        done = now + cost_s[item.item_id] / speeds[r]
        q.complete(ItemResult(item.item_id, f"r{r}", Pool.SPOT, []))
        finish[item.item_id] = done
        counts[r] += 1
        heapq.heappush(idle, (done, r))
    return Schedule(finish, counts)


def round_robin_schedule(
    items: list[WorkItem], cost_s: dict[str, float], speeds: list[float]
) -> Schedule:
    """Item ``i`` (in submission order) on replica ``i mod R``; each replica runs its list in
    order."""
    _check(items, cost_s, speeds)
    clock = [0.0] * len(speeds)
    counts = [0] * len(speeds)
    finish: dict[str, float] = {}
    for i, item in enumerate(items):
        r = i % len(speeds)
        clock[r] += cost_s[item.item_id] / speeds[r]
        finish[item.item_id] = clock[r]
        counts[r] += 1
    return Schedule(finish, counts)
