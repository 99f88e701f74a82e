"""The driver's clock: every wait of the run, and what happens after each of its slices.

Every wait of the driver is a long-poll in slices of :data:`WAIT_SLICE_S`. After each slice
:meth:`RunWatch.tick` does the driver's bookkeeping, in this order: it advances the local
spot-trace replay (if any), reads the request queue's stats, adds the GPU time held since the
last tick to the ledger (``costs.held_gpus``: replicas by pool, the trainer as on-demand), and
fails fast when the trainer has died. So GPU-seconds are counted wherever the driver waits, and
only there: the driver waits for something the whole run. Before all that, every
:data:`NODE_CHECK_S` its :class:`CapacityWatch` asks whether the live nodes still hold the
job's on-demand roles: a cluster with no autoscaler that lost one stops the run with the
reason, one with an autoscaler says what it waits for.

The queue's calls (and their recovery from its restart) are :mod:`.queue_client`'s; the watch
only reads the stats through it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TextIO

from spotlight import progress
from spotlight.scheduling.capacity import NodeType, Role, lost_roles
from spotlight.scheduling.costs import Ledger, held_gpus, ledger_pool

WAIT_SLICE_S = 1.0
"""Long-poll slice: the driver accounts time and checks the trainer at least this often."""

NODE_CHECK_S = 10.0
"""How often the driver reads the live nodes (one call to the GCS)."""

NODE_CHECKS_LOST = 2
"""Checks in a row that must find a role lost before a cluster without an autoscaler stops the
run: a node the GCS has just declared dead and a replacement started by hand may overlap."""


class ClusterLost(RuntimeError):
    """The cluster lost what the run needs (a node of an on-demand role, the control actors'
    answers) and nothing will bring it back: the run stops with its checkpoint."""


class CapacityWatch:
    """Whether the live nodes still hold the job's on-demand roles (the trainer's workers, a
    model reward), read every :data:`NODE_CHECK_S`."""

    def __init__(
        self,
        read_nodes: Callable[[], list[NodeType]],
        roles: list[Role],
        autoscaled: bool,
        log: TextIO | None,
    ):
        self.read_nodes, self.roles, self.autoscaled, self.log = read_nodes, roles, autoscaled, log
        self._last: float | None = None
        self._misses = 0
        self._said: list[str] = []

    def check(self, now: float) -> None:
        """Read the live nodes if :data:`NODE_CHECK_S` has passed since the last read.

        Raises:
            ClusterLost: without an autoscaler, when :data:`NODE_CHECKS_LOST` reads in a row
                found a role the live nodes cannot hold.
        """
        if self._last is not None and now - self._last < NODE_CHECK_S:
            return
        self._last = now
        lost = lost_roles(self.read_nodes(), self.roles)
        self._misses = self._misses + 1 if lost else 0
        if lost and self.autoscaled and lost != self._said:
            progress.line(
                self.log, "  [cluster] waiting for the autoscaler to bring up: " + "; ".join(lost)
            )
        self._said = lost
        if lost and not self.autoscaled and self._misses >= NODE_CHECKS_LOST:
            raise ClusterLost(
                "the cluster lost a node the job needs, and it has no autoscaler to replace it: "
                + "; ".join(lost)
            )


class RunWatch:
    """The run's waits, GPU-time ledger, trainer liveness and trace clock (see the module
    docstring)."""

    def __init__(
        self,
        read_stats: Callable[[], dict[str, Any]],
        ledger: Ledger,
        opts,
        log: TextIO | None,
        injector=None,
        since: float | None = None,
    ):
        self.read_stats = read_stats
        """The request queue's stats (``QueueClient.call("stats")``: survives its restart)."""
        self.ledger, self.opts, self.log = ledger, opts, log
        self.injector = injector
        """The spot-trace injector (local replay), ticked from the wait loop (main thread)."""
        self.trainer = None
        """The running trainer (``launch.TrainerRun``): held as on-demand GPUs while alive."""
        self.stats: dict[str, Any] = {}
        """The queue's last stats (pending, leased, workers by pool, counters)."""
        self._last_tick = time.monotonic() if since is None else since
        """The last tick (``since``: the monotonic time GPU time is held from)."""
        self.capacity: CapacityWatch | None = None
        """The live nodes against the job's on-demand roles (None: not watched)."""

    def tick(self) -> None:
        """One wait slice's bookkeeping (see the module docstring)."""
        if self.capacity is not None:
            self.capacity.check(time.monotonic())
        if self.injector is not None:
            for ev in self.injector.tick(time.time()):
                progress.line(self.log, f"  [spot trace] {ev.kind} spot node {ev.slot}")
        now = time.monotonic()
        dt, self._last_tick = now - self._last_tick, now
        self.stats = self.read_stats()
        alive = self.trainer is not None and self.trainer.alive()
        trainer_gpus = self.opts.num_train_workers if alive else 0
        for pool, gpus in held_gpus(self.stats["workers_by_pool"], trainer_gpus):
            self.ledger.hold(pool, gpus, dt)
        if self.trainer is not None:
            self.trainer.check()

    def bill(self, results) -> None:
        """The busy GPU time of finished work items, on the pool that did each."""
        for r in results:
            self.ledger.busy(ledger_pool(r.pool), r.busy_s)

    def wait(
        self,
        what: str,
        poll: Callable[[float], Any],
        timeout_s: float,
        desc: str | None = None,
        total: int | None = None,
        status: Callable[[], tuple[int, str]] | None = None,
    ):
        """Call ``poll(wait_s)`` (a long-poll of up to ``wait_s``) until it returns something
        not None, ticking after each slice. ``desc`` names a progress bar for the wait (of
        ``total`` items; ``status()`` -> (done, detail)), plain lines every
        ``progress_every_s`` off a terminal."""
        deadline = time.monotonic() + timeout_s
        bar = None
        if desc is not None:
            unit = "items" if total else "s"
            bar = progress.bar(self.log, desc, total, unit=unit, every_s=self.opts.progress_every_s)
        try:
            while True:
                value = poll(WAIT_SLICE_S)
                self.tick()
                if value is not None:
                    return value
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{what}: nothing after {timeout_s:.0f} s")
                if bar is not None:
                    done, detail = status() if status is not None else (0, "")
                    bar.set(done, detail)
        finally:
            if bar is not None:
                bar.close()
