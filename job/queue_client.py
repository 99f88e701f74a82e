"""The driver's side of the request queue: calls that survive the actor's restart, and waits.

Every wait of the driver is a long-poll in slices of :data:`WAIT_SLICE_S`. After each slice
:meth:`QueueClient.tick` does the driver's bookkeeping, in this order: it advances the local
spot-trace replay (if any), refreshes the queue's stats, adds the GPU time held since the last
tick to the ledger (replicas by pool, the trainer as on-demand), and fails fast when the
trainer has died. So GPU-seconds are counted wherever the driver waits, and only there: the
driver waits for something the whole run.

The queue actor restarts with no state (``max_restarts=-1``). :meth:`QueueClient.call` notices
(the queue's stats name no run, or another) and reopens the run: it re-submits the items still
outstanding and re-posts the training batch the trainer may still wait for. Results are
deterministic and idempotent by item id, so a restart costs recomputation, never an item.
"""

from __future__ import annotations

import time
from typing import Any, TextIO

from spotlight import progress
from spotlight.scheduling.costs import Ledger
from spotlight.scheduling.work_queue import Pool

WAIT_SLICE_S = 1.0
"""Long-poll slice: the driver accounts time and checks the trainer at least this often."""

CALL_RETRIES = 30
"""Attempts, a second apart, of a call to a queue actor that is restarting."""


def ledger_pool(pool: str) -> str:
    """The ledger's pool of an item's result: the trainer's GPUs are on-demand ones."""
    return Pool.ON_DEMAND if pool == Pool.TRAINER else pool


class QueueClient:
    """The request queue as the driver sees it (see the module docstring)."""

    def __init__(
        self,
        actors,
        run_id: str,
        opts,
        ledger: Ledger,
        log: TextIO | None,
        injector=None,
        since: float | None = None,
    ):
        self.actors, self.run_id, self.opts = actors, run_id, opts
        self.ledger, self.log = ledger, log
        self.injector = injector
        """The spot-trace injector (local replay), ticked from the wait loop (main thread)."""
        self.trainer = None
        """The running trainer (``launch.TrainerRun``): held as on-demand GPUs while alive."""
        self.stats: dict[str, Any] = {}
        """The queue's last stats (pending, leased, workers by pool, counters)."""
        self.items_reused = 0
        """Items whose results a restarted driver found already done in the queue."""
        self.items_lost = 0
        self.restarts = 0
        self._outstanding: dict[str, Any] = {}
        """Items submitted and not yet collected (re-submitted if the queue loses its state)."""
        self._posted: tuple[str, Any] | None = None
        """The post not yet answered (re-posted after a queue restart)."""
        self._last_tick = time.monotonic() if since is None else since
        """The last tick (``since``: the monotonic time GPU time is held from)."""

    # -- Calls ---------------------------------------------------------------------------
    def call(self, method: str, *args):
        """``queue.<method>(*args)``, retried while the actor restarts; a ``stats`` call that
        finds the run gone reopens it first (see the module docstring)."""
        import ray

        q = self.actors.queue
        for attempt in range(CALL_RETRIES):
            try:
                out = ray.get(getattr(q, method).remote(*args))
                if method == "stats" and out.get("run_id") != self.run_id:
                    self._reopen()
                    out = ray.get(q.stats.remote())
                return out
            except ray.exceptions.RayActorError:  # restarting (max_restarts=-1): retry
                if attempt == CALL_RETRIES - 1:
                    raise
                time.sleep(1.0)
        raise AssertionError("unreachable")

    def open(self) -> bool:
        """Attach the queue to this run with the run's lease and spill policy; True when it
        kept the run's earlier state."""
        import ray

        q = self.actors.queue
        kept = ray.get(q.open_run.remote(self.run_id))
        ray.get(q.configure.remote(self.opts.lease_s, self.opts.spill_policy()))
        return kept

    def _reopen(self) -> None:
        import ray

        q = self.actors.queue
        self.open()
        outstanding = list(self._outstanding.values())
        ray.get(q.submit.remote(outstanding))
        if self._posted is not None:  # the training batch the trainer may still wait for
            ray.get(q.post.remote(*self._posted))
        self.restarts += 1
        progress.line(
            self.log,
            f"  the request queue restarted with no state: re-submitted {len(outstanding)}"
            " outstanding item(s)",
        )

    def post(self, key: str, value: Any, repost: bool = True) -> None:
        """Post ``value`` under ``key`` in the mailbox; ``repost``: post it again after a queue
        restart until :meth:`answered`."""
        import ray

        if repost:
            self._posted = (key, value)
        ray.get(self.actors.queue.post.remote(key, value))

    def answered(self, *keys: str) -> None:
        """Take ``keys`` out of the mailbox: the exchange is over, nothing is re-posted."""
        for key in keys:
            self.call("take", key)
        self._posted = None

    # -- Waiting -------------------------------------------------------------------------
    def tick(self) -> None:
        """One wait slice's bookkeeping (see the module docstring)."""
        if self.injector is not None:
            for ev in self.injector.tick(time.time()):
                progress.line(self.log, f"  [spot trace] {ev.kind} spot node {ev.slot}")
        now = time.monotonic()
        dt, self._last_tick = now - self._last_tick, now
        self.stats = self.call("stats")
        for pool, n in self.stats["workers_by_pool"].items():
            if pool != Pool.TRAINER:  # trainer workers: held below, as the trainer
                self.ledger.hold(pool, n, dt)
        if self.trainer is not None and self.trainer.alive():
            self.ledger.hold(Pool.ON_DEMAND, self.opts.num_train_workers, dt)
        if self.trainer is not None:
            self.trainer.check()

    def wait(
        self,
        what: str,
        poll,
        timeout_s: float,
        desc: str | None = None,
        total: int | None = None,
        status=None,
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

    def wait_post(self, key: str, what: str, desc: str) -> Any:
        """The value posted under ``key``, waited for like any other result."""
        return self.wait(
            what, lambda wait_s: self.call("wait_post", key, wait_s), self.opts.item_timeout_s, desc
        )

    def wait_version(self, version: int) -> None:
        """Wait until the trainer has published weights ``version``."""
        import ray

        from spotlight.scheduling.polling import poll_until

        b = self.actors.broadcast

        def poll(wait_s: float):
            return poll_until(lambda: ray.get(b.header.remote(version)), wait_s)

        self.wait(
            f"weights v{version}",
            poll,
            self.opts.item_timeout_s,
            f"waiting for the trainer to publish weights v{version}",
        )

    # -- Items ---------------------------------------------------------------------------
    def submit(self, items: list) -> None:
        """Queue items whose results are collected later (exploration): not re-submitted."""
        if items:
            self.call("submit", items)

    def run_items(self, items: list, label: str) -> dict[str, Any]:
        """Submit items and wait for all results (already finished ones are reused); their
        busy time goes to the ledger."""
        ids = [it.item_id for it in items]
        self._outstanding.update({it.item_id: it for it in items})
        queued = self.call("submit", items)
        self.items_reused += len(items) - queued
        done: dict[str, Any] = {}

        def poll(wait_s: float):
            done.update(self.call("wait_results", ids, wait_s))
            return done if len(done) == len(ids) else None

        def status():
            s = self.stats
            pools = " ".join(f"{p} {n}" for p, n in sorted(s["workers_by_pool"].items()))
            return len(done), (
                f"queue {s['pending']}, leased {s['leased']}, replicas {pools or 'none'}, "
                f"${self.ledger.cost_usd():.4f}"
            )

        try:
            self.wait(label, poll, self.opts.item_timeout_s, label, len(ids), status)
        except TimeoutError:
            self.items_lost += len(ids) - len(done)
            raise
        finally:
            for i in ids:
                self._outstanding.pop(i, None)
        self.call("forget", ids)
        self.bill(done.values())
        return done

    def wait_all(self, ids: list[str], label: str) -> None:
        """Wait until every item of ``ids`` (submitted earlier) has a result."""
        done: dict[str, Any] = {}

        def poll(wait_s: float):
            done.update(self.call("wait_results", ids, wait_s))
            return done if len(done) == len(ids) else None

        self.wait(label, poll, self.opts.item_timeout_s, label, len(ids), lambda: (len(done), ""))

    def collect(self, ids: list[str]) -> dict[str, Any]:
        """The results of ``ids`` that finished; the rest are withdrawn. Billed."""
        results = self.call("results", ids)
        self.call("drop", ids)
        self.bill(results.values())
        return results

    def bill(self, results) -> None:
        for r in results:
            self.ledger.busy(ledger_pool(r.pool), r.busy_s)
