"""The ``RequestQueue`` detached actor: :class:`spotlight.scheduling.work_queue.WorkQueue` behind
Ray.

Sampler replicas pull items and complete them here; the controller submits items and collects
results. It also carries the controller <-> trainer hand-off as a small mailbox (``post`` /
``wait_post`` / ``take``): the controller posts each iteration's training batch, the trainer
posts its update. Values posted as ``[ObjectRef]`` stay in the object store; the mailbox only
holds the reference.

Waiting is long-polling: ``pull``, ``wait_results`` and ``wait_post`` take ``wait_s`` and return
as soon as there is something (or when the wait runs out), so idle replicas and a waiting
controller cost a call per second, not a busy loop. It is an async actor: methods run one at a
time on its event loop and change state only between ``await``s, so each change is atomic. Time
is the actor's own monotonic clock, so leases do not depend on callers' clocks.

A restart (``max_restarts=-1``) loses the state: the controller notices (the queue holds no run),
reopens the run, re-submits its outstanding items and re-posts its training batch; the trainer
notices a new ``incarnation`` and re-posts its last update. Results are idempotent by item id,
so a restart costs recomputation, never an item.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

import ray

from spotlight.scheduling.work_queue import (
    ItemCheckpoint,
    ItemResult,
    Pool,
    SpillPolicy,
    WorkItem,
    WorkQueue,
)

QUIET = ray.method(enable_task_events=False)
"""For the calls made every second or every item (long polls, heartbeats, completions): Ray
records no task event for them. Each would otherwise add a record to the GCS's task table
(about 60 an iteration of the default job, most of the GCS's memory growth over a long run)
and a row to the dashboard's task list, which then shows nothing else."""


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class RequestQueue:
    def __init__(self, lease_s: float = 30.0, spill: SpillPolicy | None = None):
        self._q = WorkQueue(lease_s, spill)
        self._incarnation = uuid.uuid4().hex
        """New on every (re)start: lets the trainer see that the mailbox was lost."""
        self._mailbox: dict[str, Any] = {}
        self._changed = asyncio.Event()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_change(self, timeout_s: float) -> None:
        event = self._changed
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout=max(0.0, timeout_s))

    async def _until(self, get, wait_s: float):
        """``get()`` as soon as it is truthy, or its last value after ``wait_s``."""
        deadline = time.monotonic() + wait_s
        while True:
            value = get()
            remaining = deadline - time.monotonic()
            if value or remaining <= 0:
                return value
            await self._wait_change(min(remaining, 1.0))  # wake at least once a second

    async def open_run(self, run_id: str) -> bool:
        kept = self._q.open_run(run_id)
        if not kept:
            self._mailbox.clear()
        self._notify()
        return kept

    async def submit(self, items: list[WorkItem]) -> int:
        added = self._q.submit(items, time.monotonic())
        self._notify()
        return added

    @QUIET
    async def pull(
        self,
        worker_id: str,
        max_items: int,
        kinds: list[str] | None = None,
        pool: str = Pool.SPOT,
        wait_s: float = 0.0,
    ) -> list:
        return await self._until(
            lambda: self._q.pull(worker_id, max_items, time.monotonic(), kinds, pool), wait_s
        )

    @QUIET
    async def heartbeat(self, worker_id: str) -> int:
        return self._q.heartbeat(worker_id, time.monotonic())

    @QUIET
    async def complete(self, result: ItemResult) -> bool:
        first = self._q.complete(result)
        self._notify()
        return first

    @QUIET
    async def commit(self, item_id: str, worker_id: str, checkpoint: ItemCheckpoint) -> bool:
        return self._q.commit(item_id, worker_id, checkpoint, time.monotonic())

    @QUIET
    async def leased(self) -> list[dict[str, Any]]:
        return self._q.leased()

    async def release(
        self,
        worker_id: str,
        checkpoints: dict[str, ItemCheckpoint] | None = None,
        notice: bool = False,
    ) -> int:
        n = self._q.release(worker_id, checkpoints, time.monotonic(), notice)
        self._notify()
        return n

    async def configure(self, lease_s: float, spill: SpillPolicy) -> None:
        """Set the run's lease and spill policy (the actor may outlive the driver that made it)."""
        self._q.lease_s = lease_s
        self._q.spill = spill

    @QUIET
    async def results(self, item_ids: list[str]) -> dict[str, ItemResult]:
        self._q.expire(time.monotonic())
        return self._q.results(item_ids)

    @QUIET
    async def wait_results(self, item_ids: list[str], wait_s: float) -> dict[str, ItemResult]:
        """Results among ``item_ids``: returns when all are done or after ``wait_s``."""
        ids = list(item_ids)

        def all_done():
            self._q.expire(time.monotonic())
            found = self._q.results(ids)
            return found if len(found) == len(ids) else None

        return await self._until(all_done, wait_s) or self._q.results(ids)

    async def forget(self, item_ids: list[str]) -> None:
        self._q.forget(item_ids)

    async def drop(self, item_ids: list[str]) -> int:
        return self._q.drop(item_ids)

    async def cancel(self, kind: str | None = None) -> int:
        return self._q.cancel(kind)

    @QUIET
    async def stats(self, alive_within_s: float = 5.0) -> dict[str, Any]:
        """Queue statistics plus ``workers_by_pool``: replicas that pulled lately."""
        now = time.monotonic()
        self._q.expire(now)
        return {**self._q.stats(), "workers_by_pool": self._q.workers(now, alive_within_s)}

    # -- Mailbox: controller <-> trainer hand-off --------------------------------------------
    async def post(self, key: str, value: Any) -> None:
        self._mailbox[key] = value
        self._notify()

    @QUIET
    async def wait_post(self, key: str, wait_s: float) -> Any:
        """The value under ``key`` as soon as it is posted (None after ``wait_s``)."""
        return await self._until(lambda: self._mailbox.get(key), wait_s)

    @QUIET
    async def incarnation(self) -> str:
        return self._incarnation

    async def take(self, key: str) -> Any:
        return self._mailbox.pop(key, None)

    async def clear_mailbox(self) -> int:
        n = len(self._mailbox)
        self._mailbox.clear()
        return n
