"""A trace-driven discrete-event simulator of a training run at cluster scale. No Ray.

What it simulates, per iteration: the **rollout** (work items of ``batch_size`` samples pulled from
the real :class:`~spotlight.scheduling.work_queue.WorkQueue` by sampler replicas, each replica an SP
group of GPUs), the **update** on the on-demand trainer GPUs, and, for Spotlight, **exploration**
during the update (sized by the real :class:`~spotlight.explore.planner.Planner` from the update
time and the measured throughput, exactly as the controller does; seeds chosen by the real
:func:`~spotlight.explore.seeds.max_variance_subset`). Spot capacity comes and goes in nodes of
``Scenario.gpus_per_node`` GPUs, as a replayed capacity trace says
(:mod:`spotlight.scheduling.traces`, scaled to the scenario's spot nodes); SP groups are formed
within a node, so a preemption takes whole groups: every group of the node commits its item at the
next step boundary and hands it back (a notice, ``notice_s`` ahead) or loses what it sampled since
the item's last commit (no notice: the item's lease expires and it resumes from the commit, every
``commit_every`` steps). New spot nodes take ``replica_start_s`` before they sample. When rollout
items wait ``spill_wait_s`` for spot capacity, on-demand fallback GPUs are added for the rest of the
phase, and the queue's spill rule lets them take rollout items only.

Two baselines change the schedule (``System.pipeline``). **Colocated** systems have no sampler
pool: the same on-demand GPUs sample the rollout and then all of them run the update, whose time
scales with their number as the trainer's does (:func:`update_s`). **One-step-stale** pipelines
(``async_one_step``) sample iteration t+1's rollout on the weights before t's update while t
trains, so an iteration takes the longer of the two instead of their sum; the learning model
charges the staleness (``LearningModel.async_staleness_factor``).

Accounting uses :class:`~spotlight.scheduling.costs.Ledger`: held GPU-seconds per pool (spot while
the trace holds the GPU, on-demand trainer GPUs for the whole run, on-demand samplers for the whole
run in on-demand systems, a colocated system's GPUs once, fallback GPUs while launched) and
busy GPU-seconds (sampling and training work). Work redone after preemptions without notice is
counted separately.

Inputs and what is measured versus modelled: :mod:`spotlight.sim.sim_model`.
"""

from __future__ import annotations

import heapq
import json
import math
import random
import statistics
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

from spotlight.config import ExplorationConfig
from spotlight.explore.planner import Planner, exploration_budget
from spotlight.explore.seeds import max_variance_subset
from spotlight.scheduling.costs import Ledger, PriceTable
from spotlight.scheduling.traces import CapacityTrace
from spotlight.scheduling.work_queue import (
    KIND_PRIORITY,
    ItemCheckpoint,
    ItemResult,
    Kind,
    Pool,
    SpillPolicy,
    WorkItem,
    WorkQueue,
)
from spotlight.sim.sim_model import EVALS, LearningModel, Scenario, StepCosts, System
from spotlight.sim.sim_rewards import PopulationDraws, Rewards, pstdev
from spotlight.sp.sp_groups import form_groups

SUBMIT_CHUNK = 8
"""Items a phase submits to the queue at a time, where it may hold them back (``_submit``)."""


@dataclass
class _Group:
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
class _Node:
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


@dataclass
class RunResult:
    system: str
    reached: bool
    iterations: int
    time_to_target_h: float | None
    wall_h: float
    ledger: Ledger
    preemptions: int
    notices: int
    work_redone_gpu_s: float
    spill_launches: int
    timeline: list[dict[str, Any]]
    """Per iteration: t_h, val_reward, cost_usd, util_spot, util_on_demand, spot_gpus."""
    preemption_times_h: list[float]
    on_demand_gpus: int = 0
    """On-demand GPUs held for the whole run (:meth:`System.on_demand_gpus`)."""
    total_gpus: int = 0
    """GPUs at full spot capacity (:meth:`System.total_gpus`)."""

    @property
    def time_per_iteration_s(self) -> float | None:
        """Mean seconds per iteration: ``wall_h`` (the time to target when it was reached)
        over ``iterations``, so time to target = iterations x time per iteration."""
        return self.wall_h * 3600 / self.iterations if self.iterations else None

    def summary(self) -> dict[str, Any]:
        return {
            "time_to_target_h": self.time_to_target_h,
            "reached_target": self.reached,
            "iterations": self.iterations,
            "time_per_iteration_s": self.time_per_iteration_s,
            "on_demand_gpus": self.on_demand_gpus,
            "total_gpus": self.total_gpus,
            "wall_h": self.wall_h,
            "cost_usd": self.ledger.cost_usd(),
            "gpu_util_spot": self.ledger.utilization(Pool.SPOT),
            "gpu_util_on_demand": self.ledger.utilization(Pool.ON_DEMAND),
            "gpu_h_spot": self.ledger.held_s[Pool.SPOT] / 3600,
            "gpu_h_on_demand": self.ledger.held_s[Pool.ON_DEMAND] / 3600,
            "idle_gpu_h": sum(
                self.ledger.held_s[p] - self.ledger.busy_s[p] for p in self.ledger.held_s
            )
            / 3600,
            "preemptions": self.preemptions,
            "preemption_notices": self.notices,
            "work_redone_gpu_h": self.work_redone_gpu_s / 3600,
            "spill_launches": self.spill_launches,
        }


def update_s(sc: Scenario, costs: StepCosts, gpus: int) -> float:
    """Seconds of one update on ``gpus`` GPUs: every sample of the rollout costs
    ``num_steps x train_step_fraction`` forward + backward passes (the paper scenarios: its
    recipe's, ``spotlight.sim.scenarios.trained_passes``), spread over the GPUs with linear
    data-parallel scaling (no communication cost modelled, for every system alike)."""
    return (
        sc.prompts_per_iteration
        * sc.group_size
        * max(1, round(sc.num_steps * sc.train_step_fraction))
        * costs.train_step_s
        / gpus
    )


class EmpiricalRewards(PopulationDraws):
    """The measured rewards resampled (``LearningModel.reward_draws = "empirical"``): seed ``k``
    of prompt ``p`` at iteration ``it`` draws one of the prompt's measured values. Kept to
    compare with the fitted draws (spotlight.sim.sim_rewards): it caps the best group's std at half
    the prompt's measured range, and it has no stale rewards (the selection's gain is shrunk
    linearly by the rank correlation instead). Common random numbers, as there."""

    def __init__(self, eval_file: str | Path, seed: int):
        path = Path(eval_file)
        if not path.exists():
            path = EVALS / str(eval_file)
        doc = json.loads(path.read_text())
        self.prompts = [p["rewards"] for p in doc["per_prompt"]]
        self.seed = seed

    def draw(self, it: int, prompt: int, n: int) -> list[float]:
        rng = random.Random(f"{self.seed}/{it}/{prompt}")
        pool = self.prompts[prompt]
        return [rng.choice(pool) for _ in range(n)]


class Simulation:
    """One system on one scenario and trace (see the module docstring)."""

    def __init__(
        self,
        scenario: Scenario,
        system: System,
        trace: CapacityTrace | None,
        prices: PriceTable | None = None,
        learning: LearningModel | None = None,
        seed: int = 0,
        trace_offset_s: float = 0.0,
    ):
        """``trace_offset_s``: start the (looped) trace this far past its first capacity, a
        trace window; 0 is where it first has GPUs."""
        self.sc, self.sys = scenario, system
        self.trace_offset_s = trace_offset_s
        self.costs = scenario.costs()
        self.oh = scenario.overheads
        self.learning = learning or LearningModel()
        self.rng = random.Random(seed)
        lm = self.learning
        if lm.reward_draws == "empirical":
            self.rewards = EmpiricalRewards(lm.prompts_file, seed)
        else:
            self.rewards = Rewards(lm.prompts_file, seed, lm.rank_preservation, EVALS)
        self.baseline_contrast = self.rewards.expected_random_std(scenario.group_size)
        self._shift = 0.0  # latent shift of the reward draws (LearningModel.follow_level)
        self._baseline_live: dict[float, float] = {}  # plain GRPO's live share, by shift
        self.ledger = Ledger(prices or PriceTable())
        self.t = 0.0
        self._seq = count()
        self._events: list[tuple[float, int, str, Any]] = []
        self.groups: dict[int, _Group] = {}
        self._idle: set[int] = set()  # groups without an item (ready or not)
        self._od_held: int | None = None  # on-demand GPUs held now (None: count again)
        self._gid = count()
        self.nodes: dict[int, _Node] = {}  # spot nodes held (starting, up or leaving)
        self._nid = count()
        self.version = 0
        self.preemptions = 0
        self.notices = 0
        self.redone_gpu_s = 0.0
        self.spill_launches = 0
        self.preemption_times: list[float] = []
        # Leases are modelled by the simulator (a killed group's items come back lease_s after
        # the kill); the queue itself never expires a live group's lease.
        # On-demand systems' samplers are on-demand GPUs: the spill rule must let them work.
        mode = "always" if system.samplers == Pool.ON_DEMAND else "after_wait"
        self.queue = WorkQueue(lease_s=1e15, spill=SpillPolicy(mode, self.oh.spill_wait_s))
        self.leases_expired = 0
        self.queue.open_run(f"sim-{system.name}")
        self._pending: dict[str, int] | None = None  # the queue's pending items by kind
        self._held: list[WorkItem] = []  # this phase's items not submitted yet, last first
        self._held_since = 0.0  # when the phase began
        self._fresh: set[str] = set()  # submitted items no worker has pulled yet
        self._takeable: tuple[bool, bool] | None = None  # (by spot, by on-demand); None: ask
        # what an on-demand pull may ever take (the spill rule, however long items waited)
        self._on_demand_kinds = [k for k in KIND_PRIORITY if self.queue.spill.allows(k, math.inf)]
        self._spot_poll: tuple[int, float] | None = None  # the last spot pull skipped
        self._orphans: list[WorkItem] = []
        self.planner = Planner(
            ExplorationConfig(
                mode="spot",
                max_candidates=scenario.explore_candidates,
                uniform=system.uniform_planner,
                planner_gain=system.planner_gain,
            ),
            scenario.group_size,
        )
        self._rate: float | None = None  # measured sampling throughput, samples/s
        self._fallback: list[int] = []
        self.spot_capacity = 0  # spot GPUs the trace holds now (incl. starting and leaving)
        self.colocated = system.pipeline == "colocated"
        self.trainer_gpus = system.trainer_gpus(scenario)
        if system.samplers == Pool.ON_DEMAND:
            # colocated: the trainer GPUs themselves sample, between updates
            samplers = system.sampler_gpus(scenario)
            for size in form_groups(samplers, scenario.sp_degree, scenario.valid_degrees):
                self._add_group(size, Pool.ON_DEMAND, 0.0)
        else:
            if trace is None:
                raise ValueError("a spot system needs a capacity trace")
            self._schedule_trace(trace.scaled(scenario.spot_nodes))

    # -- Events and time -----------------------------------------------------------------
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

    # -- Groups --------------------------------------------------------------------------
    def _add_group(self, size: int, pool: str, ready_at: float) -> _Group:
        g = _Group(next(self._gid), size, pool, ready_at)
        self.groups[g.gid] = g
        self._idle.add(g.gid)
        self._od_held = None
        if ready_at > self.t:
            self._push(ready_at, "group_ready", g.gid)
        return g

    def _group_gone(self, gid: int) -> None:
        self._idle.discard(gid)
        self._od_held = None

    def _form_groups(self, node: _Node, delay: float) -> None:
        """Form SP groups from ``node``'s free GPUs (ready after ``delay``)."""
        for size in form_groups(node.free, self.sc.sp_degree, self.sc.valid_degrees):
            node.free -= size
            g = self._add_group(size, Pool.SPOT, self.t + delay)
            g.node = node.nid
            node.gids.add(g.gid)

    def _step_s(self, g: _Group) -> float:
        eff = self.sc.sp_efficiency.get(g.size, 1.0)
        return self.sc.batch_size * self.costs.sample_step_s / (g.size * eff)

    def _victim(self) -> _Node | None:
        """A random held spot node that has no notice yet (starting or up)."""
        held = [n for n in self.nodes.values() if not n.leaving]
        return held[self.rng.randrange(len(held))] if held else None

    def _take_out(self, node: _Node, notice: bool) -> None:
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

    def _lose(self, node: _Node) -> None:
        del self.nodes[node.nid]
        self.spot_capacity -= node.gpus
        self.preemptions += 1
        self.preemption_times.append(self.t)

    def _break(self, g: _Group, notice: bool) -> None:
        """Group ``g``'s node is preempted: its item is committed (notice) or interrupted
        (kill)."""
        del self.groups[g.gid]
        self._group_gone(g.gid)
        if g.item is not None and g.started <= self.t:
            self._interrupt(g, notice)
        elif g.item is not None or g.queue:  # not started yet (weights loading) / push list
            self._give_back(g, [g.item] if g.item else [], notice)

    def _give_back(self, g: _Group, in_hand: list[WorkItem], notice: bool) -> None:
        if self.sys.dispatch == "push":
            self._orphans.extend(in_hand + g.queue)
            self._push(self.t + self.oh.push_detect_s, "repush")
        elif notice:
            self.queue.release(f"g{g.gid}", now=self.t, notice=True)
            self._pending_changed()
        else:
            self._push(self.t + self.oh.lease_s, "lease_expired", f"g{g.gid}")

    def _interrupt(self, g: _Group, notice: bool) -> None:
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

    # -- Sampling ------------------------------------------------------------------------
    def _dispatch(self) -> None:
        """Idle groups that are ready take work, in the groups' order (gid order)."""
        if not self._idle:
            return
        idle = [self.groups[gid] for gid in sorted(self._idle)]
        push = self.sys.dispatch == "push"
        if not push and not any(self._takeable_now()):
            # no pull can take anything: only the spot workers' sign of life (see _pull)
            for g in idle:
                if g.ready_at <= self.t and (g.trainer or g.pool == Pool.SPOT):
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
                # trainer GPUs take rollout items as spot replicas do (no spill wait)
                pool = Pool.SPOT if g.trainer else g.pool
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
        if not self._takeable_now()[pool != Pool.SPOT]:
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
        """(whether a spot pull, an on-demand one could take something now), after topping up
        the held-back items."""
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

    def _sample(self, items: list[WorkItem], deadline: float | None = None) -> set[str]:
        """Run until every item is done (or ``deadline``); returns the ids done."""
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
        while waiting:
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

    def _idle_until(self, until: float) -> None:
        while self._events and self._events[0][0] <= until:
            at, _, kind, payload = heapq.heappop(self._events)
            self._advance(at)
            if kind != "done":
                self._handle(kind, payload, False)
        self._advance(until)

    def _handle(self, kind: str, payload: Any, rollout_waiting: bool) -> None:
        if kind == "node_added":
            node = _Node(next(self._nid), self.sc.node_gpus)
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
        if not self.sys.trainer_samples or self.sys.pipeline != "separate":
            return []
        gids = []
        for size in form_groups(self.trainer_gpus, self.sc.sp_degree, self.sc.valid_degrees):
            g = self._add_group(size, Pool.ON_DEMAND, self.t)
            g.trainer, g.version = True, self.version  # they hold the fresh weights
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

    def _items(self, kind: str, it: int, samples: int) -> list[WorkItem]:
        n = self.sc.batch_size
        prompts, seeds = ("p",) * n, tuple(range(n))
        return [
            WorkItem(f"{kind}-{it}-{k}", kind, it, self.version, prompts, seeds)
            for k in range(math.ceil(samples / n))
        ]

    # -- One run -------------------------------------------------------------------------
    def run(self) -> RunResult:
        sc, lm = self.sc, self.learning
        G, P = sc.group_size, sc.prompts_per_iteration
        train_s = update_s(sc, self.costs, self.trainer_gpus)
        one_step_stale = self.sys.pipeline == "async_one_step"
        progress = 0.0
        it = 0
        timeline = []
        reached_at = None
        explored: dict[int, int] = {}  # prompt index -> seeds explored (from the last update)
        horizon = sc.max_hours * 3600
        while self.t < horizon:
            if lm.follow_level:  # the draws at the current validation level
                level = lm.initial + (lm.target - lm.initial) * progress / lm.baseline_iterations
                self._shift = self.rewards.shift_for_level(level)
            batch = self.rewards.batch(it, P)
            next_prompts = self.rewards.batch(it + 1, P)
            t0 = self.t
            if one_step_stale:  # this rollout was sampled during the last update
                if it == 0:  # ... except the first, which fills the pipeline
                    self._sample(self._items(Kind.ROLLOUT, it, P * G))
                contrast, live = self._rollout(it, batch, explored, fresh=False)
            elif self.sys.exploration == "critical_path":
                n = sc.critical_candidates
                self._sample(self._items(Kind.ROLLOUT, it, P * n))
                contrast, live = self._rollout(it, batch, dict.fromkeys(batch, n), fresh=True)
            else:
                joined = self._trainer_joins()
                self._sample(self._items(Kind.ROLLOUT, it, P * G))
                self._trainer_leaves(joined)
                contrast, live = self._rollout(it, batch, explored, fresh=False)
            sample_s = self.t - t0
            if sample_s > 0:
                samples = P * (
                    sc.critical_candidates if self.sys.exploration == "critical_path" else G
                )
                if self.sys.trainer_samples:  # the samplers' own rate: what explores later
                    self._rate = self._samplers_rate() or self._rate
                else:
                    self._rate = samples / sample_s
            # the update; Spotlight explores the next prompts meanwhile, a one-step-stale
            # pipeline samples the next rollout, a colocated system's samplers are training
            t_train_end = self.t + train_s
            self.ledger.busy(Pool.ON_DEMAND, train_s * self.trainer_gpus)
            explored = {}
            gain = self._progress(contrast, live)
            if one_step_stale:
                if it > 0:  # trained on the weights before the last update
                    gain *= lm.async_staleness_factor
                if min(1.0, (progress + gain) / lm.baseline_iterations) < 1.0:
                    # the next rollout, on the weights before this update, meanwhile
                    self._sample(self._items(Kind.ROLLOUT, it + 1, P * G))
                self._sample([], deadline=t_train_end)
            elif self.sys.exploration == "spot":
                cap = sc.explore_budget if sc.explore_budget is not None else 10**9
                budget = exploration_budget(train_s, self._rate or 0.0, cap)
                names = [str(p) for p in next_prompts]
                plan = self.planner.plan(names, budget)
                want = {p: plan[str(p)] for p in next_prompts if plan[str(p)] > 0}
                items = self._items(Kind.EXPLORE, it, sum(want.values()))
                done = self._sample(items, deadline=t_train_end)
                share = len(done) / len(items) if items else 0.0
                # exploration finishes in item order: prompts are covered in plan order
                covered = int(share * len(want) + 1e-9)
                explored = dict(list(want.items())[:covered])
            else:
                self._sample([], deadline=t_train_end)
            self.version += 1
            self.t = max(self.t, t_train_end)
            progress += gain
            it += 1
            frac = min(1.0, progress / lm.baseline_iterations)
            val = lm.initial + (lm.target - lm.initial) * frac
            snap = self.ledger.snapshot()
            timeline.append(
                {
                    "iteration": it,
                    "t_h": self.t / 3600,
                    "val_reward": val,
                    "cost_usd": snap["cost_usd"],
                    "util_spot": snap["util_spot"],
                    "util_on_demand": snap["util_on_demand"],
                    "spot_gpus": self.spot_capacity,
                    "contrast": contrast,
                    "live_share": live,
                }
            )
            if frac >= 1.0:
                reached_at = self.t
                break
        return RunResult(
            system=self.sys.name,
            reached=reached_at is not None,
            iterations=it,
            time_to_target_h=reached_at / 3600 if reached_at is not None else None,
            wall_h=self.t / 3600,
            ledger=self.ledger,
            preemptions=self.preemptions,
            notices=self.notices,
            work_redone_gpu_s=self.redone_gpu_s,
            spill_launches=self.spill_launches,
            timeline=timeline,
            preemption_times_h=[t / 3600 for t in self.preemption_times],
            on_demand_gpus=self.sys.on_demand_gpus(sc),
            total_gpus=self.sys.total_gpus(sc),
        )

    def _progress(self, contrast: float, live: float) -> float:
        """What an iteration with this rollout counts for, in plain-GRPO iterations
        (LearningModel.signal)."""
        lm = self.learning
        if lm.signal == "contrast":
            return (contrast / self.baseline_contrast) ** lm.contrast_exponent
        baseline = self._baseline_live.get(self._shift)
        if baseline is None:  # once per level (once per run without follow_level)
            baseline = self.rewards.live_share(self.sc.group_size, self._shift)
            self._baseline_live[self._shift] = baseline
        return (live / max(baseline, MIN_BASELINE_LIVE)) ** lm.live_exponent

    def _rollout(
        self, it: int, batch: list[int], explored: dict[int, int], fresh: bool
    ) -> tuple[float, float]:
        """(mean group reward std, share of live groups) of this rollout (see LearningModel): a
        prompt explored with at least 2G seeds trains on the max-variance G of them, chosen on
        its stale rewards (``fresh``: on the current weights, the critical path) and scored by
        its fresh ones."""
        G = self.sc.group_size
        stds, live = [], 0
        if isinstance(self.rewards, EmpiricalRewards):
            for p in batch:
                n = explored.get(p, 0)
                if n < 2 * G:
                    draws = self.rewards.draw(it, p, G)
                    self.planner.note_rollout(str(p), draws)
                    stds.append(pstdev(draws))
                else:
                    draws = self.rewards.draw(it, p, n)
                    rho = 1.0 if fresh else self.learning.rank_preservation
                    random_std = pstdev(draws[:G])
                    chosen = [draws[i] for i in max_variance_subset(draws, G)]
                    self.planner.observe(str(p), draws)
                    stds.append(random_std + rho * (pstdev(chosen) - random_std))
                    draws = chosen
                live += max(draws) > min(draws)
            return statistics.fmean(stds), live / len(batch)
        # every prompt's seeds at once: seed i's rewards do not depend on how many are drawn
        ns = [explored.get(p, 0) for p in batch]
        stale_all, now_all = self.rewards.pairs(
            [it] * len(batch), batch, max([G, *ns]), self._shift
        )
        for p, n, stale, now in zip(batch, ns, stale_all.tolist(), now_all.tolist(), strict=True):
            if n < 2 * G:
                trained = now[:G]
                self.planner.note_rollout(str(p), trained)
            else:
                seen = now[:n] if fresh else stale[:n]
                trained = [now[i] for i in max_variance_subset(seen, G)]
                self.planner.observe(str(p), seen)
            stds.append(pstdev(trained))
            live += max(trained) > min(trained)
        return statistics.fmean(stds), live / len(batch)


MIN_BASELINE_LIVE = 1e-3
"""Floor of plain GRPO's expected live share in the ``live_groups`` progress ratio (a population
whose groups are all dead gives plain GRPO nothing to learn from, and no ratio)."""
