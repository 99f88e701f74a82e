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

    def __post_init__(self) -> None:
        if self.kind not in KIND_PRIORITY:
            raise ValueError(f"unknown item kind {self.kind!r}; known: {', '.join(KIND_PRIORITY)}")
        if len(self.prompts) != len(self.seeds) or not self.prompts:
            raise ValueError(
                f"item {self.item_id}: {len(self.prompts)} prompts and {len(self.seeds)} seeds"
                " (need the same number, at least one)"
            )


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


@dataclass
class _Lease:
    item: WorkItem
    worker_id: str
    expires_at: float


class WorkQueue:
    """Pending items, leases and results of one run (see the module docstring)."""

    def __init__(self, lease_s: float = 30.0, spill: SpillPolicy | None = None):
        if lease_s <= 0:
            raise ValueError(f"lease_s must be > 0, got {lease_s}")
        self.lease_s = lease_s
        self.spill = spill or SpillPolicy()
        self.run_id: str | None = None
        self._pending: dict[str, tuple[int, int, WorkItem]] = {}
        self._seq: dict[str, int] = {}
        self._since: dict[str, float] = {}
        self._checkpoints: dict[str, ItemCheckpoint] = {}
        self._leases: dict[str, _Lease] = {}
        self._results: dict[str, ItemResult] = {}
        self._order = itertools.count()
        self._workers: dict[str, tuple[str, float]] = {}
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
            known = item.item_id in self._pending or item.item_id in self._leases
            if known or item.item_id in self._results:
                continue
            self._seq[item.item_id] = next(self._order)
            self._queue(replace(item, resume=None), now)
            added += 1
        return added

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

        def may_take(item: WorkItem) -> bool:
            if item.kind not in allowed:
                return False
            if pool != Pool.ON_DEMAND:
                return True
            waited = max(now - self._since[item.item_id], spot_absent_s)
            return self.spill.allows(item.kind, waited)

        ready = sorted(
            (entry for entry in self._pending.values() if may_take(entry[2])),
            key=lambda e: (e[0], e[1]),
        )
        out = []
        for _, _, item in ready[: max(0, max_items)]:
            del self._pending[item.item_id]
            self._leases[item.item_id] = _Lease(item, worker_id, now + self.lease_s)
            ck = self._checkpoints.get(item.item_id)
            if ck is not None:
                self.items_resumed += 1
                self.steps_resumed += ck.step
                item = replace(item, resume=ck)
            out.append(item)
        return out

    def commit(self, item_id: str, worker_id: str, checkpoint: ItemCheckpoint, now: float) -> bool:
        """Keep ``checkpoint`` as the item's in-flight state. Only the current lease holder may
        commit, and only a step at least as far as the one held; a commit extends the lease."""
        lease = self._leases.get(item_id)
        held = self._checkpoints.get(item_id)
        if lease is None or lease.worker_id != worker_id or (held and checkpoint.step < held.step):
            self.checkpoints_refused += 1
            return False
        if len(checkpoint.trajectories) != len(lease.item.seeds):
            raise ValueError(
                f"item {item_id}: checkpoint has {len(checkpoint.trajectories)} trajectories,"
                f" the item {len(lease.item.seeds)} samples"
            )
        self._checkpoints[item_id] = replace(checkpoint, worker_id=worker_id)
        lease.expires_at = now + self.lease_s
        self.checkpoints_committed += 1
        return True

    def leased(self) -> list[dict[str, Any]]:
        """Items in flight: id, kind, holder and the step of the last commit (0: none)."""
        return [
            {
                "item_id": i,
                "kind": lease.item.kind,
                "worker_id": lease.worker_id,
                "committed_step": ck.step if (ck := self._checkpoints.get(i)) else 0,
            }
            for i, lease in self._leases.items()
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
        held = [lease for lease in self._leases.values() if lease.worker_id == worker_id]
        for lease in held:
            lease.expires_at = now + self.lease_s
        return len(held)

    def complete(self, result: ItemResult) -> bool:
        """Record a result; False (and counted) when the item already has one or is unknown."""
        item_id = result.item_id
        if item_id in self._results:
            self.duplicates_ignored += 1
            return False
        lease = self._leases.pop(item_id, None)
        pending = self._pending.pop(item_id, None)
        if lease is None and pending is None:
            self.duplicates_ignored += 1
            return False
        self._results[item_id] = result
        self._forget_item(item_id)
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
        mine = [i for i, lease in self._leases.items() if lease.worker_id == worker_id]
        for item_id in mine:
            self._queue(self._leases.pop(item_id).item, now)
        self.released += len(mine)
        return len(mine)

    def expire(self, now: float) -> int:
        """Return items whose lease ran out to the queue; returns how many."""
        late = [i for i, lease in self._leases.items() if lease.expires_at <= now]
        for item_id in late:
            self._queue(self._leases.pop(item_id).item, now)
        self.leases_expired += len(late)
        return len(late)

    def results(self, item_ids: Iterable[str]) -> dict[str, ItemResult]:
        """Finished results among ``item_ids``."""
        return {i: self._results[i] for i in item_ids if i in self._results}

    def forget(self, item_ids: Iterable[str]) -> None:
        """Drop finished results the driver has consumed (keeps the actor's memory bounded)."""
        for i in item_ids:
            self._results.pop(i, None)

    def drop(self, item_ids: Iterable[str]) -> int:
        """Withdraw items wherever they are (pending, leased or finished): a late completion of
        a leased one is then ignored. Returns how many were still pending or leased."""
        n = 0
        for i in item_ids:
            n += (self._pending.pop(i, None) is not None) + (self._leases.pop(i, None) is not None)
            self._results.pop(i, None)
            self._forget_item(i)
        return n

    def cancel(self, kind: str | None = None) -> int:
        """Drop pending (not leased) items, of one kind or all; returns how many."""
        gone = [i for i, (_, _, it) in self._pending.items() if kind is None or it.kind == kind]
        for i in gone:
            del self._pending[i]
            self._forget_item(i)
        return len(gone)

    def stats(self) -> dict[str, Any]:
        """Depth by kind, leases, results held and the exactly-once counters."""
        depth = dict.fromkeys(KIND_PRIORITY, 0)
        for _, _, item in self._pending.values():
            depth[item.kind] += 1
        return {
            "run_id": self.run_id,
            "pending": sum(depth.values()),
            "pending_by_kind": depth,
            "leased": len(self._leases),
            "results": len(self._results),
            "duplicates_ignored": self.duplicates_ignored,
            "leases_expired": self.leases_expired,
            "released": self.released,
            "notices": len(self._noticed),
            "checkpoints_held": len(self._checkpoints),
            "checkpoints_committed": self.checkpoints_committed,
            "checkpoints_refused": self.checkpoints_refused,
            "items_resumed": self.items_resumed,
            "steps_resumed": self.steps_resumed,
        }

    def _queue(self, item: WorkItem, now: float) -> None:
        # Keeps its kind's priority and its submission order: a returned item goes ahead of
        # the items submitted after it.
        self._pending[item.item_id] = (KIND_PRIORITY[item.kind], self._seq[item.item_id], item)
        self._since[item.item_id] = now

    def _forget_item(self, item_id: str) -> None:
        self._checkpoints.pop(item_id, None)
        self._since.pop(item_id, None)
        self._seq.pop(item_id, None)
