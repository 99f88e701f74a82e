"""Sampling on the simulated cluster: a phase's work items go through the real
:class:`~spotlight.scheduling.work_queue.WorkQueue` (pulled by idle groups, or pushed round robin
for the push-dispatch ablation), and :meth:`QueueSampling._sample` runs events until they are
done or a deadline passes. No Ray.
"""

from __future__ import annotations

import heapq
import math

from spotlight.scheduling.work_queue import ItemResult, Kind, Pool, WorkItem
from spotlight.sim.sim_cluster import Cluster

SUBMIT_CHUNK = 8
"""Items a phase submits to the queue at a time, where it may hold them back (``_submit``)."""


class QueueSampling(Cluster):
    """Work items through the queue onto the cluster's groups (see the module docstring)."""

    def _dispatch(self) -> None:
        """Idle groups that are ready take work, in the groups' order (gid order)."""
        if not self._idle:
            return
        idle = [self.groups[gid] for gid in sorted(self._idle)]
        push = self.sys.dispatch == "push"
        if not push and not any(self._takeable_now()):
            # no pull can take anything: only the spot workers' sign of life (see _pull)
            for g in idle:
                if g.ready_at <= self.t and g.pool == Pool.SPOT:
                    self._spot_poll = (g.gid, self.t)
            return
        for g in idle:
            if g.item is not None or g.ready_at > self.t:
                continue
            if push:
                if not g.queue:
                    continue
                item = g.queue.pop(0)
                start_step = 0
            else:
                # trainer GPUs take rollout items at once (no spill wait), as pool trainer:
                # no sign of spot life (the spill rule's clock runs on)
                pool = Pool.TRAINER if g.trainer else g.pool
                got = self._pull(g.gid, pool)
                if not got:
                    continue
                item = got[0]
                start_step = item.resume.step if item.resume else 0
            g.item, g.start_step = item, start_step
            self._idle.discard(g.gid)
            load = self.oh.weights_broadcast_s if g.version != item.weights_version else 0.0
            g.version = item.weights_version
            g.step_s = self._step_s(g)
            g.started = self.t + load
            self._push(
                g.started + (self.sc.num_steps - start_step) * g.step_s,
                "done",
                (g.gid, item.item_id),
            )

    def _pull(self, gid: int, pool: str) -> list[WorkItem]:
        """``WorkQueue.pull`` of one item for group ``gid``, skipped where it would find nothing.

        Idle groups poll after every event; most polls find nothing pending, or nothing an
        on-demand worker may ever take (exploration). The simulator keeps the queue's pending
        items by kind (:meth:`_pending_by_kind`) and skips those pulls. A pull that takes
        nothing changes one thing the simulation reads later: a spot worker's pull is its sign
        of life (the spill rule measures how long spot workers have been absent), so the last
        skipped spot pull is replayed (taking nothing, at its own time) before the next
        on-demand pull that runs. The queue's answers are those of pulling every time."""
        if not self._takeable_now()[pool == Pool.ON_DEMAND]:
            if pool == Pool.SPOT:
                self._spot_poll = (gid, self.t)
            return []
        if pool == Pool.SPOT:
            self._spot_poll = None  # this pull is later
        elif self._spot_poll is not None:
            self.queue.pull(f"g{self._spot_poll[0]}", 0, self._spot_poll[1], pool=Pool.SPOT)
            self._spot_poll = None
        got = self.queue.pull(f"g{gid}", 1, self.t, pool=pool)
        if got:
            pending = self._pending_by_kind()
            for item in got:
                pending[item.kind] -= 1
                self._fresh.discard(item.item_id)
            self._takeable = None
        return got

    def _takeable_now(self) -> tuple[bool, bool]:
        """(whether a spot or trainer pull, an on-demand one could take something now), after
        topping up the held-back items."""
        if self._held:
            self._top_up()
        if self._takeable is None:
            pending = self._pending_by_kind()
            self._takeable = (
                any(pending.values()),
                any(pending[k] for k in self._on_demand_kinds),
            )
        return self._takeable

    def _pending_by_kind(self) -> dict[str, int]:
        """The queue's pending items by kind (asked again after a release or a drop)."""
        if self._pending is None:
            self._pending = dict(self.queue.stats()["pending_by_kind"])
        return self._pending

    def _pending_changed(self) -> None:
        """Items were released or dropped: ask the queue what is pending."""
        self._pending = self._takeable = None

    def _submit(self, items: list[WorkItem]) -> None:
        """Queue a phase's items, ``SUBMIT_CHUNK`` at a time as pulls need them (:meth:`_top_up`):
        the queue then sorts a few pending items per pull, not the phase's hundreds. Every
        chunk is submitted at the phase's start time (the spill rule's wait counts from there)
        and the queue serves items in submission order, so every pull gets what it would get
        had the whole phase been submitted at once."""
        self._held = list(reversed(items))
        self._held_since = self.t
        self._fresh = set()
        self._top_up()

    def _top_up(self) -> None:
        """Submit the next held-back items when none submitted is still unpulled (an item back
        from a released lease does not count: a pull may refuse it and take a fresh one)."""
        if self._held and not self._fresh:
            chunk = [self._held.pop() for _ in range(min(SUBMIT_CHUNK, len(self._held)))]
            self._submit_now(chunk, self._held_since)
            self._fresh.update(it.item_id for it in chunk)

    def _submit_now(self, items: list[WorkItem], now: float) -> None:
        added = self.queue.submit(items, now=now)
        if added == len(items) and self._pending is not None:
            for item in items:
                self._pending[item.kind] += 1
            self._takeable = None
        else:
            self._pending_changed()

    def _sample(
        self, items: list[WorkItem], deadline: float | None = None, join_at: float | None = None
    ) -> set[str]:
        """Run until every item is done (or ``deadline``); returns the ids done. ``join_at``
        (the pipelined schedule's update end): if items are still waiting then, the trainer
        GPUs join (:meth:`_trainer_joins`) until every item is done, and leave. They sample
        with a copy they keep of the weights before the update, the items' version: no
        pick-up."""
        if deadline is not None and join_at is not None:
            raise ValueError("a phase with a deadline is withdrawn then: nothing to join")
        ids = {it.item_id for it in items}
        done: set[str] = set()
        if items:
            if self.sys.dispatch == "push":
                # round robin over the groups there are (exploration: spot groups only)
                eligible = [
                    g
                    for g in self.groups.values()
                    if g.pool == Pool.SPOT or items[0].kind != Kind.EXPLORE
                ]
                ready = [g for g in eligible if g.ready_at <= self.t] or eligible
                for k, it in enumerate(items):
                    if ready:
                        ready[k % len(ready)].queue.append(it)
                    else:
                        self._orphans.append(it)
                if not ready:
                    self._push(self.t + self.oh.push_detect_s, "repush")
            else:
                self._submit(items)
        rollout = any(it.kind == Kind.ROLLOUT for it in items)
        spill_check = self.sys.samplers == Pool.SPOT and rollout
        if spill_check:
            self._push(self.t + self.oh.spill_wait_s, "spill_check")
        self._dispatch()
        waiting = set(ids)  # ids - done
        joined: list[int] = []
        while waiting:
            if join_at is not None and (not self._events or self._events[0][0] > join_at):
                self._advance(max(self.t, join_at))  # the update ends: the trainer GPUs join
                joined = self._trainer_joins()  # (the caller counts the update's version)
                join_at = None
                self._dispatch()
                continue
            if not self._events:
                if deadline is not None:  # nothing will happen: idle to it, below
                    break
                raise RuntimeError("simulation stalled: work left but nothing can happen")
            at, _, kind, payload = self._events[0]
            if deadline is not None and at > deadline:
                break
            heapq.heappop(self._events)
            self._advance(at)
            if kind == "done":
                gid, item_id = payload
                g = self.groups.get(gid)
                if g is None or g.item is None or g.item.item_id != item_id:
                    continue  # the group was broken meanwhile
                self.ledger.busy(g.pool, (self.t - g.started) * g.size)
                g.item = None
                self._idle.add(gid)
                if self.sys.dispatch == "push" or self.queue.complete(
                    ItemResult(item_id, f"g{gid}", g.pool, [])
                ):
                    done.add(item_id)
                    waiting.discard(item_id)
            else:
                self._handle(kind, payload, spill_check and bool(waiting))
            self._dispatch()
        self._trainer_leaves(joined)
        if deadline is not None and self.t < deadline:
            self._idle_until(deadline)
        self._held, self._fresh = [], set()  # all done, or withdrawn (some never submitted)
        if deadline is not None:  # withdraw what is left (exploration)
            left = list(ids - done)
            if left:
                self.queue.drop(left)
                self._pending_changed()
            for g in self.groups.values():
                if g.item is not None and g.item.item_id in ids:
                    self.ledger.busy(g.pool, max(0.0, self.t - g.started) * g.size)
                    g.item = None
                    self._idle.add(g.gid)
                g.queue = [it for it in g.queue if it.item_id not in ids]
            self._orphans = [it for it in self._orphans if it.item_id not in ids]
        self._release_fallback()
        return done

    def _items(self, kind: str, it: int, samples: int) -> list[WorkItem]:
        n = self.sc.batch_size
        prompts, seeds = ("p",) * n, tuple(range(n))
        return [
            WorkItem(f"{kind}-{it}-{k}", kind, it, self.version, prompts, seeds)
            for k in range(math.ceil(samples / n))
        ]
