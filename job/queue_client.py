"""The driver's side of the request queue: calls that survive the actor's restart, and items.

The queue actor restarts with no state (``max_restarts=-1``). :meth:`QueueClient.call` notices
(the queue's stats name no run, or another) and reopens the run: it re-submits the items still
outstanding and re-posts the training batch the trainer may still wait for. Results are
deterministic and idempotent by item id, so a restart costs recomputation, never an item.

Waiting for results or posts goes through the run's :class:`~spotlight.job.run_watch.RunWatch`,
which accounts GPU time and watches the trainer while the driver waits; finished items' busy
time goes to its ledger.
"""

from __future__ import annotations

import time
from typing import Any, TextIO

from spotlight import progress
from spotlight.job.run_watch import ClusterLost

CALL_RETRIES = 30
"""Attempts, a second apart, of a call to a queue actor that is restarting."""

CALL_TIMEOUT_S = 120.0
"""The longest the driver waits for one answer of the queue or the broadcast actor (their
calls return within a wait slice). Longer, the actor is restarting where no node can hold
it, or its node has stopped answering: the run stops (``ClusterLost``) instead of waiting
for ever."""


def answer(ref, what: str):
    """``ray.get(ref)``, or :class:`~spotlight.job.run_watch.ClusterLost` naming ``what`` after
    :data:`CALL_TIMEOUT_S`."""
    import ray

    try:
        return ray.get(ref, timeout=CALL_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        raise ClusterLost(
            f"{what} has not answered for {CALL_TIMEOUT_S:.0f} s: its node (the one offering"
            " 'control', the head in cluster.yaml) is gone or too busy to answer"
        ) from None


class QueueClient:
    """The request queue as the driver sees it (see the module docstring)."""

    def __init__(self, actors, run_id: str, opts, log: TextIO | None, watch):
        self.actors, self.run_id, self.opts, self.log = actors, run_id, opts, log
        self.watch = watch
        """The run's :class:`~spotlight.job.run_watch.RunWatch`: every wait goes through it."""
        self.items_reused = 0
        """Items whose results a restarted driver found already done in the queue."""
        self.items_lost = 0
        self.restarts = 0
        self._outstanding: dict[str, Any] = {}
        """Items submitted and not yet collected (re-submitted if the queue loses its state)."""
        self._posted: tuple[str, Any] | None = None
        """The post not yet answered (re-posted after a queue restart)."""

    # -- Calls ---------------------------------------------------------------------------
    def call(self, method: str, *args):
        """``queue.<method>(*args)``, retried while the actor restarts; a ``stats`` call that
        finds the run gone reopens it first (see the module docstring)."""
        import ray

        q = self.actors.queue
        for attempt in range(CALL_RETRIES):
            try:
                out = answer(getattr(q, method).remote(*args), "the request queue")
                if method == "stats" and out.get("run_id") != self.run_id:
                    self._reopen()
                    out = answer(q.stats.remote(), "the request queue")
                return out
            except ray.exceptions.RayActorError:  # restarting (max_restarts=-1): retry
                if attempt == CALL_RETRIES - 1:
                    raise
                time.sleep(1.0)
        raise AssertionError("unreachable")

    def open(self) -> bool:
        """Attach the queue to this run with the run's lease and spill policy; True when it
        kept the run's earlier state."""
        q = self.actors.queue
        kept = answer(q.open_run.remote(self.run_id), "the request queue")
        answer(q.configure.remote(self.opts.lease_s, self.opts.spill_policy()), "the request queue")
        return kept

    def _reopen(self) -> None:
        q = self.actors.queue
        self.open()
        outstanding = list(self._outstanding.values())
        answer(q.submit.remote(outstanding), "the request queue")
        if self._posted is not None:  # the training batch the trainer may still wait for
            answer(q.post.remote(*self._posted), "the request queue")
        self.restarts += 1
        progress.line(
            self.log,
            f"  the request queue restarted with no state: re-submitted {len(outstanding)}"
            " outstanding item(s)",
        )

    def post(self, key: str, value: Any, repost: bool = True) -> None:
        """Post ``value`` under ``key`` in the mailbox; ``repost``: post it again after a queue
        restart until :meth:`answered`."""
        if repost:
            self._posted = (key, value)
        answer(self.actors.queue.post.remote(key, value), "the request queue")

    def answered(self, *keys: str) -> None:
        """Take ``keys`` out of the mailbox: the exchange is over, nothing is re-posted."""
        for key in keys:
            self.call("take", key)
        self._posted = None

    # -- Waiting (through the run's watch) ----------------------------------------------
    def wait_post(self, key: str, what: str, desc: str) -> Any:
        """The value posted under ``key``, waited for like any other result."""
        return self.watch.wait(
            what, lambda wait_s: self.call("wait_post", key, wait_s), self.opts.item_timeout_s, desc
        )

    def wait_version(self, version: int) -> None:
        """Wait until the trainer has published weights ``version``."""
        from spotlight.scheduling.polling import poll_until

        b = self.actors.broadcast

        def poll(wait_s: float):
            return poll_until(
                lambda: answer(b.header.remote(version), "the weight broadcast"), wait_s
            )

        self.watch.wait(
            f"weights v{version}",
            poll,
            self.opts.item_timeout_s,
            f"waiting for the trainer to publish weights v{version}",
        )

    # -- Items ---------------------------------------------------------------------------
    def submit(self, items: list) -> None:
        """Queue items whose results :meth:`collect` takes later (exploration). Until then a
        queue restart re-submits them: a fixed budget waits for every one of them."""
        if items:
            self._outstanding.update({it.item_id: it for it in items})
            self.call("submit", items)

    def run_items(self, items: list, label: str) -> dict[str, Any]:
        """Submit items and wait for all results (already finished ones are reused); their
        busy time goes to the ledger."""
        self.start_items(items)
        return self.finish_items(items, label)

    def start_items(self, items: list) -> None:
        """Submit items whose results :meth:`finish_items` waits for later (a pipelined
        rollout); a queue restart meanwhile re-submits them. Finished ones are reused."""
        self._outstanding.update({it.item_id: it for it in items})
        queued = self.call("submit", items)
        self.items_reused += len(items) - queued

    def finish_items(self, items: list, label: str) -> dict[str, Any]:
        """Wait for all results of :meth:`start_items`' ``items``; billed."""
        ids = [it.item_id for it in items]
        try:
            done = self.wait_results(ids, label)
        finally:
            for i in ids:
                self._outstanding.pop(i, None)
        self.call("forget", ids)
        self.watch.bill(done.values())
        return done

    def wait_results(self, ids: list[str], label: str) -> dict[str, Any]:
        """Wait until every item of ``ids`` (submitted already) has a result; the results.
        Items with none when the wait times out count as lost."""
        done: dict[str, Any] = {}

        def poll(wait_s: float):
            done.update(self.call("wait_results", ids, wait_s))
            return done if len(done) == len(ids) else None

        def status():
            s = self.watch.stats
            pools = " ".join(f"{p} {n}" for p, n in sorted(s["workers_by_pool"].items()))
            return len(done), (
                f"queue {s['pending']}, leased {s['leased']}, replicas {pools or 'none'}, "
                f"${self.watch.ledger.cost_usd():.4f}"
            )

        try:
            return self.watch.wait(label, poll, self.opts.item_timeout_s, label, len(ids), status)
        except TimeoutError:
            self.items_lost += len(ids) - len(done)
            raise

    def collect(self, ids: list[str]) -> dict[str, Any]:
        """The results of ``ids`` that finished; the rest are withdrawn. Billed."""
        results = self.call("results", ids)
        self.call("drop", ids)
        for i in ids:
            self._outstanding.pop(i, None)
        self.watch.bill(results.values())
        return results
