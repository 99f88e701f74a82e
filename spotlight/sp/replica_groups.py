"""A sampler replica's SP worker processes and the groups they form, kept whole through losses.

The replica (deployments/sampler.py) owns ``workers`` processes, one per GPU
(:class:`~spotlight.sp.elastic.NodeWorkers`), grouped at its SP degree. When workers die (their
GPUs are gone), the survivors are re-formed into the valid groups they can make
(:func:`~spotlight.sp.sp_groups.group_shape`) without new processes or a weights reload, and the
step that failed is redone from the state before it (:meth:`ReplicaGroups.step`). Before the next
item the lost workers are replaced once (:meth:`ReplicaGroups.regrow`): new processes take the
weights from a surviving peer through shared memory. No Ray here: the replica calls it.
"""

from __future__ import annotations

import logging
import time
import traceback
from typing import Any

from spotlight.flow.sampler import Trajectory
from spotlight.sp.elastic import NodeWorkers, WorkerLost
from spotlight.sp.sp_groups import check_degree, group_shape, share_item

logger = logging.getLogger(__name__)


class ReplicaGroups:
    """``workers`` SP worker processes at ``degree``, for a model with ``heads`` attention heads.

    ``counters`` (the replica's) gets ``sp_regroups``, ``sp_regrowths`` and
    ``sp_regrow_failures`` incremented; ``regroup_s`` and ``regrow_s`` hold each one's seconds.
    ``log`` takes the warning when lost workers cannot be replaced (the replica passes Serve's).
    """

    def __init__(
        self,
        workers: int,
        threads: int,
        degree: int,
        heads: int,
        counters: dict[str, Any],
        log: logging.Logger | None = None,
    ):
        check_degree(degree, heads)
        self.log = log or logger
        self.degree = degree
        self.heads = heads
        self.counters = counters
        self.nodes = NodeWorkers(workers, threads)
        self.lost: list[int] = []
        """Workers lost since the last regrow: replaced before the next item."""
        self.regroup_s: list[float] = []
        self.regrow_s: list[float] = []

    @property
    def group_degree(self) -> int:
        """The degree the first group samples at now (below ``degree`` after a loss)."""
        return len(self.nodes.groups[0])

    def shape(self, members: list[int]) -> list[list[int]]:
        """The groups ``members`` form at this replica's SP degree."""
        return group_shape(members, self.degree, self.heads)

    def set_weights(self, state: dict[str, Any], policy: dict[str, Any]) -> None:
        """Give every worker a new weights version; form the groups the first time. A worker
        that died meanwhile is regrouped away, as in :meth:`step`."""
        while True:
            try:
                self.nodes.set_weights(state, policy)
                if not self.nodes.groups:
                    self.nodes.form(self.shape(list(self.nodes.workers)))
                return
            except WorkerLost as e:
                self.regroup(e.dead)

    def step(
        self, prompts, seeds, trajectories: list[Trajectory], sampler: dict, version: int
    ) -> list[Trajectory]:
        """One denoising step of an item's samples: one group normally; after a loss, every
        group the survivors form (say 2 + 1), each taking a share of the samples
        (``sp_groups.share_item``). A loss during the step regroups and redoes it."""
        before = [t.to_bytes() for t in trajectories]
        while True:
            shares = share_item(len(before), self.nodes.groups)
            used = [group for group, _ in shares]
            parts = [(list(prompts[sl]), list(seeds[sl]), before[sl]) for _, sl in shares]
            try:
                states = self.nodes.sample_groups(used, parts, sampler, version, 1)
                return [Trajectory.from_bytes(b) for part in states for b in part]
            except WorkerLost as e:
                self.regroup(e.dead)

    def regroup(self, dead: list[int]) -> None:
        """Drop ``dead`` workers and re-form the survivors' groups."""
        t0 = time.perf_counter()
        for wid in dead:
            self.nodes.lose(wid)
            self.lost.append(wid)
        survivors = list(self.nodes.workers)
        if not survivors:
            raise RuntimeError("every SP worker of this replica died")
        self.nodes.form(self.shape(survivors))
        self.counters["sp_regroups"] += 1
        self.regroup_s.append(time.perf_counter() - t0)

    def regrow(self) -> None:
        """Replace the workers lost since the last item: new processes that take the weights
        from a surviving peer through shared memory (no storage read), then the replica's full
        set of groups again. The next item waits for it (3.4 s on the 2-core CPU,
        docs/benchmarks.md). Tried once per loss: a worker that cannot start (its GPU is really
        gone) is given up, and the replica carries on with the groups it has."""
        t0 = time.perf_counter()
        lost, self.lost = sorted(self.lost), []
        try:
            self.nodes.join(lost, peer=next(iter(self.nodes.workers)))
            self.nodes.form(self.shape(sorted(self.nodes.workers)))
        except WorkerLost as e:  # a worker died meanwhile: regroup what is left, give up
            self.regroup(e.dead)
            self.lost = []
            self.counters["sp_regrow_failures"] += 1
            return
        except Exception:
            self.log.warning(
                "[spotlight] SP workers %s could not be replaced:\n%s", lost, traceback.format_exc()
            )
            for wid in lost:
                if wid in self.nodes.workers:
                    self.nodes.lose(wid)
            self.regroup([])
            self.counters["sp_regrow_failures"] += 1
            return
        self.counters["sp_regrowths"] += 1
        self.regrow_s.append(time.perf_counter() - t0)

    def shutdown(self) -> None:
        self.nodes.shutdown()
