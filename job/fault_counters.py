"""The run's fault counters: preemptions and what the request queue did about them, for
``metrics.jsonl`` and ``summary.json`` (the names are ``spotlight.training.run_folder``'s)."""

from __future__ import annotations

from typing import Any

from spotlight.training.run_folder import QUEUE_COUNTERS


def counters(queue, stats: dict[str, Any], injector, base: dict[str, int]) -> dict[str, Any]:
    """The counters from the driver's queue client ``queue``, the queue actor's ``stats``, the
    trace replay's ``injector`` (None without one) and ``base``, what a resumed run carried
    over of the queue's own counters.

    ``preemptions``: nodes the trace replay took away (locally), else the replicas that
    reported a notice. ``items_resumed`` / ``steps_resumed``: items continued from a committed
    checkpoint, and the denoising steps that saved. ``items_lost``: items whose result never
    came (0 unless a run fails)."""
    s, inj = stats, injector
    out = {
        "preemptions": inj.stats.preemptions if inj else s.get("notices", 0),
        "preemption_notices": inj.stats.notices if inj else s.get("notices", 0),
        "items_resumed": s.get("items_resumed", 0),
        "steps_resumed": s.get("steps_resumed", 0),
        "items_released": s.get("released", 0),
        "leases_expired": s.get("leases_expired", 0),
        "items_reused": queue.items_reused,
        "items_lost": queue.items_lost,
        "duplicates_ignored": s.get("duplicates_ignored", 0),
        "queue_restarts": queue.restarts,
    }
    for k in QUEUE_COUNTERS:
        out[k] += base.get(k, 0)
    if inj is not None:
        out["spot_nodes"] = len(inj.nodes.nodes)
    return out
