"""How many sampler replicas the queue's depth asks for (pure; the Serve policy wraps it)."""

from __future__ import annotations

import math


def desired_replicas(
    pending: float,
    leased: float,
    current: int,
    # the deployment's current target (running + starting replicas)
    min_replicas: int,
    max_replicas: int,
    items_per_replica: float = 2.0,
) -> int:
    """Replicas to run for ``pending`` queued and ``leased`` in-flight items.

    Enough replicas that each has about ``items_per_replica`` items of outstanding work, within
    [min_replicas, max_replicas]. With no work at all the current count is kept (the replicas
    are about to get the next iteration's items; Serve's downscale delay removes truly idle
    ones). With no metrics yet (``pending`` is NaN) the current count is kept too.
    """
    if min_replicas < 0 or max_replicas < max(1, min_replicas) or items_per_replica <= 0:
        raise ValueError(
            f"bad bounds: min {min_replicas}, max {max_replicas}, per replica {items_per_replica}"
        )
    if math.isnan(pending) or math.isnan(leased):
        return max(min_replicas, min(max_replicas, current))
    work = pending + leased
    want = current if work <= 0 else math.ceil(work / items_per_replica)
    return max(min_replicas, min(max_replicas, want))
