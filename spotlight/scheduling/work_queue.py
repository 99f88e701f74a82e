"""The pull-based work queue's rules, without Ray.

Sampler replicas *pull* work: each asks for what it can take now, so fast and slow replicas
each stay busy and nobody pushes work at a replica that is about to disappear. The
``RequestQueue`` actor (actors/request_queue.py) is a thin shell around :class:`WorkQueue`.

Rules:

* **Priority.** Items are served by kind, in :data:`KIND_PRIORITY` order (rollout items of the
  critical path first, validation next, exploration last), then first in, first out.
* **Leases.** A pulled item is leased to the replica for ``lease_s`` seconds; heartbeats extend
  the lease. An expired lease (the replica died without a word) returns the item to the queue.
* **Exactly once.** Item ids are unique. Submitting a known id again is a no-op; only the first
  completion of an item is kept, later ones (a replica whose lease had expired, a retry) are
  counted in ``duplicates_ignored`` and dropped.
* **Checkpoints.** The replica holding an item commits its in-flight state (an
  :class:`ItemCheckpoint`: every trajectory after step k, with its generator state and weights
  version) every few steps and when it is told its node is going away. An item that returns to
  the queue, by a release or an expired lease, keeps its last checkpoint, and the next replica to
  pull it resumes from there (``WorkItem.resume``). Only the lease holder may commit, and never a
  step older than the one held.
* **Returned items keep their place.** A released or expired item goes back ahead of the items of
  its kind submitted after it.
* **Spill to on-demand.** Replicas on on-demand capacity (``pool='on_demand'``) take only rollout
  and validation items, and only as the :class:`SpillPolicy` allows: ``never``, ``always``, or
  ``after_wait``: once the item has waited ``wait_s`` seconds (spot capacity is not keeping
  up), or no spot worker has pulled or heartbeat for ``wait_s`` (spot capacity is gone).
  Exploration never runs on on-demand capacity.
* **Runs.** The queue belongs to one run (``run_id``); opening another run clears it, opening the
  same run again (a restarted driver) keeps finished results, which a deterministic
  re-submission then reuses instead of recomputing.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any


class Kind(StrEnum):
    """What a work item is for (a str: items and results cross Ray and JSON as plain names)."""

    ROLLOUT = "rollout"
    """An iteration's training samples, on the fresh weights."""
    VAL = "val"
    """Validation samples (fixed seeds)."""
    EXPLORE = "explore"
    """Candidate seeds explored on stale weights (spot capacity only)."""


class Pool(StrEnum):
    """The capacity a replica runs on."""

    SPOT = "spot"
    ON_DEMAND = "on_demand"
    TRAINER = "trainer"
    """A Ray Train worker sampling rollout items while it waits (``RayOptions.trainer_samples``):
    on-demand GPUs already held for training, taking rollout items at once (no spill wait)."""


KIND_PRIORITY = {Kind.ROLLOUT: 0, Kind.VAL: 1, Kind.EXPLORE: 2}
"""Lower is served first."""

SPILL_MODES = ("never", "after_wait", "always")
SPILL_KINDS = (Kind.ROLLOUT, Kind.VAL)
"""What on-demand sampler replicas may take."""


@dataclass(frozen=True)
class SpillPolicy:
    """When replicas on on-demand capacity may take the critical path's items."""

    mode: str = "after_wait"
    wait_s: float = 30.0

    def __post_init__(self) -> None:
        if self.mode not in SPILL_MODES:
            raise ValueError(f"unknown spill mode {self.mode!r}; known: {', '.join(SPILL_MODES)}")
        if self.wait_s < 0:
            raise ValueError(f"spill wait_s must be >= 0, got {self.wait_s}")

    def allows(self, kind: str, pending_s: float) -> bool:
        if kind not in SPILL_KINDS or self.mode == "never":
            return False
        return self.mode == "always" or pending_s >= self.wait_s


@dataclass(frozen=True)
class ItemCheckpoint:
    """An item's in-flight state: every sample's trajectory after ``step`` steps."""

    step: int
    trajectories: tuple[bytes, ...]
    """``Trajectory.to_bytes()`` per sample, in the item's order."""
    worker_id: str = ""
    """Who committed it."""

    @property
    def nbytes(self) -> int:
        return sum(len(t) for t in self.trajectories)


@dataclass(frozen=True)
class WorkItem:
    """A batch of (prompt, seed) samples to draw with one weights version."""

    item_id: str
    kind: str
    """'rollout', 'val' or 'explore'."""
    iteration: int
    weights_version: int
    prompts: tuple[str, ...]
    seeds: tuple[int, ...]
    resume: ItemCheckpoint | None = None
    """Set by :meth:`WorkQueue.pull` when the item was interrupted: continue from here."""
    init_seeds: tuple[int, ...] | None = None
    """Per sample, the seed of its initial noise when a group shares it
    (``sampler.group_init_noise``); None: each seed draws its own."""

    def __post_init__(self) -> None:
        if self.kind not in KIND_PRIORITY:
            raise ValueError(f"unknown item kind {self.kind!r}; known: {', '.join(KIND_PRIORITY)}")
        if len(self.prompts) != len(self.seeds) or not self.prompts:
            raise ValueError(
                f"item {self.item_id}: {len(self.prompts)} prompts and {len(self.seeds)} seeds"
                " (need the same number, at least one)"
            )
        if self.init_seeds is not None and len(self.init_seeds) != len(self.seeds):
            n, m = len(self.init_seeds), len(self.seeds)
            raise ValueError(f"item {self.item_id}: {n} init seeds for {m} seeds")


@dataclass
class ItemResult:
    """What a replica returns for one item."""

    item_id: str
    worker_id: str
    pool: str
    """'spot' or 'on_demand': the capacity the item ran on."""
    rewards: list[float]
    trajectories: list[bytes] = field(default_factory=list)
    """``Trajectory.to_bytes()`` per sample (empty for validation items)."""
    busy_s: float = 0.0
    """Seconds the replica spent on the item (sampling + reward)."""
    resumed_from_step: int = 0
    """The committed step the replica started from (0: from the seed)."""
    sp_degree: int = 1
    """Workers (GPUs) the replica sampled the item with (Ulysses SP above 1)."""
    weights_load_s: float = 0.0
    """Seconds the replica spent fetching, verifying and loading the item's weights version
    (0 when it already held it)."""
    images: Any = None
    """uint8 images (N, H, W, C) for validation items (logged to W&B), else None."""


class ItemState(StrEnum):
    """Where an item is in its life: submitted -> PENDING -> LEASED -> DONE -> forgotten.

    A LEASED item goes back to PENDING when its holder releases it or its lease expires (its
    checkpoint and its place in line stay); a DONE item holds its result until the driver
    forgets it (:meth:`~WorkQueue.forget`). :meth:`~WorkQueue.drop` forgets an item wherever it
    is, :meth:`~WorkQueue.cancel` a pending one."""

    PENDING = "pending"
    """Waiting to be pulled."""
    LEASED = "leased"
    """Pulled by a worker, whose lease (extended by heartbeats and commits) is running."""
    DONE = "done"
    """Completed: the result is held."""


@dataclass
class _Entry:
    """One item's whole state in the queue."""

    item: WorkItem
    """As submitted (``resume`` unset: :meth:`WorkQueue.pull` adds the checkpoint)."""
    seq: int
    """Submission order: an item that returns to the queue keeps its place."""
    state: ItemState = ItemState.PENDING
    since: float = 0.0
    """When it last became PENDING (the spill policy's wait)."""
    worker_id: str = ""
    """The lease holder (LEASED)."""
    expires_at: float = 0.0
    """When the lease runs out (LEASED)."""
    checkpoint: ItemCheckpoint | None = None
    """The last committed in-flight state (PENDING or LEASED; dropped once DONE)."""
    result: ItemResult | None = None
    """The first completion (DONE)."""

    @property
    def priority(self) -> tuple[int, int]:
        return KIND_PRIORITY[self.item.kind], self.seq


class WorkQueue:
    """Pending items, leases and results of one run (see the module docstring).

    Every item the queue knows has one :class:`_Entry` whose ``state`` says where it is;
    ``_in[state]`` indexes the entries by state (kept by :meth:`_move` alone)."""

    def __init__(self, lease_s: float = 30.0, spill: SpillPolicy | None = None):
        if lease_s <= 0:
            raise ValueError(f"lease_s must be > 0, got {lease_s}")
        self.lease_s = lease_s
        self.spill = spill or SpillPolicy()
        self.run_id: str | None = None
        self._in: dict[ItemState, dict[str, _Entry]] = {state: {} for state in ItemState}
        self._order = itertools.count()
        self._workers: dict[str, tuple[str, float]] = {}
        """Worker id -> (pool, last pull or heartbeat)."""
        self._spot_seen: float | None = None
        """Last time a spot worker pulled or heartbeat (None: never; then the first submit)."""
        self._first_submit: float | None = None
        self.duplicates_ignored = 0
        self.leases_expired = 0
        self.released = 0
        self._noticed: set[str] = set()
        self.checkpoints_committed = 0
        self.checkpoints_refused = 0
        self.items_resumed = 0
        self.steps_resumed = 0

    # -- States ----------------------------------------------------------------------------
    def state(self, item_id: str) -> ItemState | None:
        """Where ``item_id`` is; None: unknown (never submitted, forgotten or dropped)."""
        entry = self._entry(item_id)
        return entry.state if entry is not None else None

    def _entry(self, item_id: str) -> _Entry | None:
        for index in self._in.values():
            if item_id in index:
                return index[item_id]
        return None

    def _move(self, entry: _Entry, state: ItemState, now: float = 0.0) -> None:
        """Put ``entry`` in ``state`` (it may be new); back to PENDING restarts its wait."""
        self._in[entry.state].pop(entry.item.item_id, None)
        entry.state = state
        self._in[state][entry.item.item_id] = entry
        if state == ItemState.PENDING:
            entry.since = now
        if state == ItemState.DONE:
            entry.checkpoint = None

    def _forget(self, entry: _Entry) -> None:
        self._in[entry.state].pop(entry.item.item_id, None)

    # -- Runs and submissions --------------------------------------------------------------
    def open_run(self, run_id: str) -> bool:
        """Attach the queue to ``run_id``; returns True when it kept a previous state."""
        if run_id == self.run_id:
            return True
        self.__init__(self.lease_s, self.spill)
        self.run_id = run_id
        return False

    def submit(self, items: Iterable[WorkItem], now: float = 0.0) -> int:
        """Queue new items; ids already pending, leased or finished are skipped. Returns how
        many were queued."""
        added = 0
        if self._first_submit is None:
            self._first_submit = now
        for item in items:
            if self._entry(item.item_id) is not None:
                continue
            if item.resume is not None:  # a checkpoint comes from commits, never a submit
                item = replace(item, resume=None)
            entry = _Entry(item, next(self._order))
            self._move(entry, ItemState.PENDING, now)
            added += 1
        return added

    # -- Workers ---------------------------------------------------------------------------
    def pull(
        self,
        worker_id: str,
        max_items: int,
        now: float,
        kinds: Iterable[str] | None = None,
        pool: str = Pool.SPOT,
    ) -> list[WorkItem]:
        """Lease up to ``max_items`` items to ``worker_id``, highest priority first; an
        interrupted item comes with its checkpoint in ``resume``. A worker on ``on_demand``
        capacity gets only what the spill policy allows.

        A pull is also the worker's sign of life: :meth:`workers` counts who pulled lately.
        """
        self._workers[worker_id] = (pool, now)
        if pool == Pool.SPOT:
            self._spot_seen = now
        self.expire(now)
        allowed = set(KIND_PRIORITY if kinds is None else kinds)
        seen = self._spot_seen if self._spot_seen is not None else self._first_submit
        spot_absent_s = now - seen if seen is not None else 0.0

        def may_take(entry: _Entry) -> bool:
            if entry.item.kind not in allowed:
                return False
            if pool != Pool.ON_DEMAND:
                return True
            waited = max(now - entry.since, spot_absent_s)
            return self.spill.allows(entry.item.kind, waited)

        pending = self._in[ItemState.PENDING].values()
        if max_items == 1:  # the common pull: the best item is enough (priorities are unique)
            best = min(filter(may_take, pending), key=lambda e: e.priority, default=None)
            ready = [best] if best is not None else []
        else:
            ready = sorted(filter(may_take, pending), key=lambda e: e.priority)[: max(0, max_items)]
        out = []
        for entry in ready:
            self._move(entry, ItemState.LEASED)
            entry.worker_id, entry.expires_at = worker_id, now + self.lease_s
            item = entry.item
            if entry.checkpoint is not None:
                self.items_resumed += 1
                self.steps_resumed += entry.checkpoint.step
                item = replace(item, resume=entry.checkpoint)
            out.append(item)
        return out

    def commit(self, item_id: str, worker_id: str, checkpoint: ItemCheckpoint, now: float) -> bool:
        """Keep ``checkpoint`` as the item's in-flight state. Only the current lease holder may
        commit, and only a step at least as far as the one held; a commit extends the lease."""
        entry = self._in[ItemState.LEASED].get(item_id)
        held = entry.checkpoint if entry is not None else None
        if entry is None or entry.worker_id != worker_id or (held and checkpoint.step < held.step):
            self.checkpoints_refused += 1
            return False
        if len(checkpoint.trajectories) != len(entry.item.seeds):
            raise ValueError(
                f"item {item_id}: checkpoint has {len(checkpoint.trajectories)} trajectories,"
                f" the item {len(entry.item.seeds)} samples"
            )
        entry.checkpoint = replace(checkpoint, worker_id=worker_id)
        entry.expires_at = now + self.lease_s
        self.checkpoints_committed += 1
        return True

    def leased(self) -> list[dict[str, Any]]:
        """Items in flight: id, kind, holder and the step of the last commit (0: none)."""
        return [
            {
                "item_id": i,
                "kind": e.item.kind,
                "worker_id": e.worker_id,
                "committed_step": e.checkpoint.step if e.checkpoint else 0,
            }
            for i, e in self._in[ItemState.LEASED].items()
        ]

    def workers(self, now: float, within_s: float) -> dict[str, int]:
        """How many workers per pool pulled or heartbeat within the last ``within_s``."""
        counts: dict[str, int] = {}
        for pool, seen in self._workers.values():
            if now - seen <= within_s:
                counts[pool] = counts.get(pool, 0) + 1
        return counts

    def heartbeat(self, worker_id: str, now: float) -> int:
        """Extend every lease of ``worker_id``; returns how many it holds."""
        if worker_id in self._workers:
            self._workers[worker_id] = (self._workers[worker_id][0], now)
            if self._workers[worker_id][0] == Pool.SPOT:
                self._spot_seen = now
        held = self._held_by(worker_id)
        for entry in held:
            entry.expires_at = now + self.lease_s
        return len(held)

    def _held_by(self, worker_id: str) -> list[_Entry]:
        return [e for e in self._in[ItemState.LEASED].values() if e.worker_id == worker_id]

    def complete(self, result: ItemResult) -> bool:
        """Record a result; False (and counted) when the item already has one or is unknown.
        A pending item may complete too (its lease had expired, its holder finished)."""
        entry = self._entry(result.item_id)
        if entry is None or entry.state == ItemState.DONE:
            self.duplicates_ignored += 1
            return False
        self._move(entry, ItemState.DONE)
        entry.result = result
        return True

    def release(
        self,
        worker_id: str,
        checkpoints: dict[str, ItemCheckpoint] | None = None,
        now: float = 0.0,
        notice: bool = False,
    ) -> int:
        """Return every item leased to ``worker_id`` to the queue (a replica that stops),
        committing ``checkpoints`` (by item id) first; ``notice``: it stops because its node is
        being preempted (``notices`` counts such workers once each). Returns how many items
        went back."""
        if notice:
            self._noticed.add(worker_id)
        for item_id, ck in (checkpoints or {}).items():
            self.commit(item_id, worker_id, ck, now)
        self._workers.pop(worker_id, None)
        mine = self._held_by(worker_id)
        for entry in mine:
            self._move(entry, ItemState.PENDING, now)
        self.released += len(mine)
        return len(mine)

    def expire(self, now: float) -> int:
        """Return items whose lease ran out to the queue; returns how many."""
        late = [e for e in self._in[ItemState.LEASED].values() if e.expires_at <= now]
        for entry in late:
            self._move(entry, ItemState.PENDING, now)
        self.leases_expired += len(late)
        return len(late)

    # -- The driver's side -----------------------------------------------------------------
    def results(self, item_ids: Iterable[str]) -> dict[str, ItemResult]:
        """Finished results among ``item_ids``."""
        done = self._in[ItemState.DONE]
        return {i: done[i].result for i in item_ids if i in done}

    def forget(self, item_ids: Iterable[str]) -> None:
        """Drop finished results the driver has consumed (keeps the actor's memory bounded)."""
        done = self._in[ItemState.DONE]
        for i in item_ids:
            done.pop(i, None)

    def drop(self, item_ids: Iterable[str]) -> int:
        """Withdraw items wherever they are (pending, leased or finished): a late completion of
        a leased one is then ignored. Returns how many were still pending or leased."""
        n = 0
        for i in item_ids:
            entry = self._entry(i)
            if entry is None:
                continue
            n += entry.state != ItemState.DONE
            self._forget(entry)
        return n

    def cancel(self, kind: str | None = None) -> int:
        """Drop pending (not leased) items, of one kind or all; returns how many."""
        pending = self._in[ItemState.PENDING]
        gone = [e for e in pending.values() if kind is None or e.item.kind == kind]
        for entry in gone:
            self._forget(entry)
        return len(gone)

    def stats(self) -> dict[str, Any]:
        """Depth by kind, leases, results held and the exactly-once counters."""
        depth = dict.fromkeys(KIND_PRIORITY, 0)
        for entry in self._in[ItemState.PENDING].values():
            depth[entry.item.kind] += 1
        leased = self._in[ItemState.LEASED]
        in_flight = [*self._in[ItemState.PENDING].values(), *leased.values()]
        return {
            "run_id": self.run_id,
            "pending": sum(depth.values()),
            "pending_by_kind": depth,
            "leased": len(leased),
            "results": len(self._in[ItemState.DONE]),
            "duplicates_ignored": self.duplicates_ignored,
            "leases_expired": self.leases_expired,
            "released": self.released,
            "notices": len(self._noticed),
            "checkpoints_held": sum(e.checkpoint is not None for e in in_flight),
            "checkpoints_committed": self.checkpoints_committed,
            "checkpoints_refused": self.checkpoints_refused,
            "items_resumed": self.items_resumed,
            "steps_resumed": self.steps_resumed,
        }
