"""The simulated cluster under :class:`~spotlight.sim.simulator.Simulation`: time and its events,
the spot nodes a capacity trace adds and takes away (with a notice or without), the SP groups
formed on them and on on-demand GPUs (fallback samplers, trainer GPUs that sample), what a
preemption does to the item a group holds, and the held GPU time. No Ray.

:class:`Cluster` holds no state of its own: ``Simulation.__init__`` sets it up, and
:class:`~spotlight.sim.sim_sampling.QueueSampling` runs work items on its groups.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from spotlight.scheduling.traces import CapacityTrace
from spotlight.scheduling.work_queue import ItemCheckpoint, Kind, Pool, WorkItem
from spotlight.sp.sp_groups import form_groups


@dataclass
class Group:
    gid: int
    size: int
    pool: str
    ready_at: float
    item: WorkItem | None = None
    started: float = 0.0
    start_step: int = 0
    step_s: float = 0.0
    version: int = -1
    queue: list[WorkItem] = field(default_factory=list)
    """Push dispatch: the items assigned to this group."""
    trainer: bool = False
    """Trainer GPUs sampling the rollout (``System.trainer_samples``): held anyway (not counted
    again), pull rollout items without waiting, never preempted."""
    node: int | None = None
    """The spot node the group runs on (None: on-demand)."""


@dataclass
class Node:
    """A spot instance of ``Scenario.gpus_per_node`` GPUs: the unit the traces count, and what a
    preemption takes (all its GPUs at once, with one notice or none)."""

    nid: int
    gpus: int
    ready: bool = False
    """False while its replicas start (``replica_start_s``)."""
    free: int = 0
    """Ready GPUs in no group."""
    gids: set[int] = field(default_factory=set)
    """Its SP groups (formed within the node)."""
    leaving: bool = False
    """Got a notice: its groups are broken, it is held until it goes."""


class Cluster:
    """Events, nodes, groups and preemptions of one simulated run (see the module docstring)."""

    def _push(self, at: float, kind: str, payload: Any = None) -> None:
        heapq.heappush(self._events, (at, next(self._seq), kind, payload))

    def _schedule_trace(self, trace: CapacityTrace) -> None:
        """Capacity changes for ``max_hours``, the trace (in nodes) looped, from where it first
        has capacity. Each lost node gets a notice ``notice_s`` earlier, except a ``hard_share``
        of them."""
        start = next((t for t, c in zip(trace.times_s, trace.counts, strict=True) if c > 0), 0.0)
        w = trace.window(start) if start < trace.duration_s else trace
        w = w.rotated(self.trace_offset_s)
        horizon = self.sc.max_hours * 3600 + 1
        offset, previous = 0.0, 0
        while offset < horizon:
            for t, c in zip(w.times_s, w.counts, strict=True):
                at = offset + t
                if at >= horizon:
                    break
                for _ in range(c - previous):
                    self._push(at, "node_added")
                for _ in range(previous - c):
                    if self.rng.random() < self.oh.hard_share:
                        self._push(at, "kill")
                    else:
                        self._push(max(0.0, at - self.oh.notice_s), "notice", at)
                previous = c
            offset += max(w.duration_s, 1.0)

    def _advance(self, to: float) -> None:
        """Account held GPUs from ``self.t`` to ``to``."""
        dt = to - self.t
        if dt < 0:
            raise AssertionError(f"time going backwards: {self.t} -> {to}")
        self.ledger.hold(Pool.SPOT, self.spot_capacity, dt)
        if self._od_held is None:  # recounted after the groups change
            od = 0 if self.colocated else self.trainer_gpus  # colocated: the groups train too
            od += sum(
                g.size for g in self.groups.values() if g.pool == Pool.ON_DEMAND and not g.trainer
            )
            self._od_held = od
        self.ledger.hold(Pool.ON_DEMAND, self._od_held, dt)
        self.t = to

    def _add_group(self, size: int, pool: str, ready_at: float) -> Group:
        g = Group(next(self._gid), size, pool, ready_at)
        self.groups[g.gid] = g
        self._idle.add(g.gid)
        self._od_held = None
        if ready_at > self.t:
            self._push(ready_at, "group_ready", g.gid)
        return g

    def _group_gone(self, gid: int) -> None:
        self._idle.discard(gid)
        self._od_held = None

    def _form_groups(self, node: Node, delay: float) -> None:
        """Form SP groups from ``node``'s free GPUs (ready after ``delay``)."""
        for size in form_groups(node.free, self.sc.sp_degree, self.sc.valid_degrees):
            node.free -= size
            g = self._add_group(size, Pool.SPOT, self.t + delay)
            g.node = node.nid
            node.gids.add(g.gid)

    def _step_s(self, g: Group) -> float:
        eff = self.sc.sp_efficiency.get(g.size, 1.0)
        return self.sc.batch_size * self.costs.sample_step_s / (g.size * eff)

    def _victim(self) -> Node | None:
        """A random held spot node that has no notice yet (starting or up)."""
        held = [n for n in self.nodes.values() if not n.leaving]
        return held[self.rng.randrange(len(held))] if held else None

    def _take_out(self, node: Node, notice: bool) -> None:
        """``node`` is out of use: each of its groups loses its GPUs, its item committed
        (notice) or interrupted (kill)."""
        for gid in sorted(node.gids):
            self._break(self.groups[gid], notice)
        node.gids.clear()
        node.free = 0

    def _on_notice(self, gone_at: float) -> None:
        node = self._victim()
        if node is None:  # the node that goes is not up yet: it goes without a usable notice
            self._push(gone_at, "kill")
            return
        self._take_out(node, notice=True)
        node.leaving = True
        self.notices += 1
        self._push(gone_at, "gone", node.nid)

    def _on_kill(self) -> None:
        node = self._victim()
        if node is not None:
            self._take_out(node, notice=False)
            self._lose(node)

    def _lose(self, node: Node) -> None:
        del self.nodes[node.nid]
        self.spot_capacity -= node.gpus
        self.preemptions += 1
        self.preemption_times.append(self.t)

    def _break(self, g: Group, notice: bool) -> None:
        """Group ``g``'s node is preempted: its item is committed (notice) or interrupted
        (kill)."""
        del self.groups[g.gid]
        self._group_gone(g.gid)
        if g.item is not None and g.started <= self.t:
            self._interrupt(g, notice)
        elif g.item is not None or g.queue:  # not started yet (weights loading) / push list
            self._give_back(g, [g.item] if g.item else [], notice)

    def _give_back(self, g: Group, in_hand: list[WorkItem], notice: bool) -> None:
        if self.sys.dispatch == "push":
            self._orphans.extend(in_hand + g.queue)
            self._push(self.t + self.oh.push_detect_s, "repush")
        elif notice:
            self.queue.release(f"g{g.gid}", now=self.t, notice=True)
            self._pending_changed()
        else:
            self._push(self.t + self.oh.lease_s, "lease_expired", f"g{g.gid}")

    def _interrupt(self, g: Group, notice: bool) -> None:
        item = g.item
        assert item is not None
        done_s = self.t - g.started
        steps = min(self.sc.num_steps - 1, g.start_step + int(done_s / g.step_s))
        self.ledger.busy(Pool.SPOT, done_s * g.size)
        if self.sys.dispatch == "push":  # no commits: the item starts over elsewhere
            self.redone_gpu_s += done_s * g.size
            self._give_back(g, [item], notice)
            return
        if notice:  # the step in progress is finished and committed (notice >> a step)
            kept = min(self.sc.num_steps - 1, steps + 1)
            self.queue.commit(item.item_id, f"g{g.gid}", self._ck(item, kept), self.t)
        else:  # the last commit, every commit_every steps, survives
            k = self.sc.commit_every
            kept = max(g.start_step, (steps // k) * k) if k else g.start_step
            self.redone_gpu_s += max(0.0, done_s - (kept - g.start_step) * g.step_s) * g.size
            if kept > g.start_step:
                self.queue.commit(item.item_id, f"g{g.gid}", self._ck(item, kept), self.t)
        self._give_back(g, [item], notice)

    def _ck(self, item: WorkItem, step: int) -> ItemCheckpoint:
        return ItemCheckpoint(step, tuple(b"" for _ in item.seeds))

    def _idle_until(self, until: float) -> None:
        while self._events and self._events[0][0] <= until:
            at, _, kind, payload = heapq.heappop(self._events)
            self._advance(at)
            if kind != "done":
                self._handle(kind, payload, False)
        self._advance(until)

    def _handle(self, kind: str, payload: Any, rollout_waiting: bool) -> None:
        if kind == "node_added":
            node = Node(next(self._nid), self.sc.node_gpus)
            self.nodes[node.nid] = node
            self.spot_capacity += node.gpus
            self._push(self.t + self.oh.replica_start_s, "node_ready", node.nid)
        elif kind == "node_ready":
            node = self.nodes.get(payload)
            if node is not None and not node.leaving:  # (else preempted while starting)
                node.ready, node.free = True, node.gpus
                self._form_groups(node, 0.0)
        elif kind == "notice":
            self._on_notice(payload)
        elif kind == "gone":
            self._lose(self.nodes[payload])
        elif kind == "kill":
            self._on_kill()
        elif kind == "lease_expired":
            self.leases_expired += self.queue.release(payload, now=self.t)
            self._pending_changed()
        elif kind == "group_ready":
            pass  # nothing to change: the dispatch after every event gives it work
        elif kind == "repush":
            ready = [g for g in self.groups.values() if g.ready_at <= self.t]
            spot = [g for g in ready if g.pool == Pool.SPOT]
            left = []
            for k, it in enumerate(self._orphans):
                to = spot if it.kind == Kind.EXPLORE else ready  # exploration stays on spot
                if to:
                    to[k % len(to)].queue.append(it)
                else:
                    left.append(it)
            self._orphans = left
            if left:
                self._push(self.t + self.oh.push_detect_s, "repush")
        elif kind == "spill_check":
            if rollout_waiting and not self._fallback and self.sc.fallback_gpus > 0:
                spot_ready = [
                    g for g in self.groups.values() if g.pool == Pool.SPOT and g.ready_at <= self.t
                ]
                if not spot_ready:
                    self.spill_launches += 1
                    for size in form_groups(
                        self.sc.fallback_gpus, self.sc.sp_degree, self.sc.valid_degrees
                    ):
                        g = self._add_group(size, Pool.ON_DEMAND, self.t + self.oh.replica_start_s)
                        self._fallback.append(g.gid)
            if rollout_waiting:  # look again (at least a second later)
                self._push(self.t + max(1.0, self.oh.spill_wait_s), "spill_check")
        else:
            raise AssertionError(f"unknown event {kind}")

    def _release_fallback(self) -> None:
        """At a phase's end, give the fallback GPUs back once spot replicas are up again (the
        job's Serve autoscaling keeps replicas a while after their work: here, until spot
        capacity returns)."""
        if not self._fallback:
            return
        if not any(g.pool == Pool.SPOT and g.ready_at <= self.t for g in self.groups.values()):
            return
        for gid in self._fallback:
            g = self.groups.pop(gid, None)
            self._group_gone(gid)
            if g is not None and g.item is not None:
                raise AssertionError("fallback group released with an item in hand")
        self._fallback = []

    def _samplers_rate(self) -> float:
        """Samples/s the sampler groups up now can do (the controller's estimate with
        ``trainer_samples``: the replicas' per-item rate times their number)."""
        sc = self.sc
        return sum(
            sc.batch_size / (sc.num_steps * self._step_s(g))
            for g in self.groups.values()
            if not g.trainer and g.ready_at <= self.t
        )

    def _trainer_joins(self) -> list[int]:
        """``System.trainer_samples``: the trainer GPUs form sampling groups for the rollout."""
        if not self.sys.trainer_samples or self.sys.pipeline not in ("separate", "pipelined"):
            return []
        gids = []
        for size in form_groups(self.trainer_gpus, self.sc.sp_degree, self.sc.valid_degrees):
            g = self._add_group(size, Pool.ON_DEMAND, self.t)
            g.trainer, g.version = True, self.version  # they hold the rollout's weights
            self._od_held = None
            gids.append(g.gid)
        return gids

    def _trainer_leaves(self, gids: list[int]) -> None:
        """The rollout is done: the trainer GPUs go back to training (they hold no item: the
        rollout's items are all done)."""
        for gid in gids:
            g = self.groups.pop(gid)
            self._group_gone(gid)
            if g.item is not None:
                raise AssertionError("trainer group left the rollout with an item in hand")
