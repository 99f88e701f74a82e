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

    Scale *up* to about ``items_per_replica`` items of outstanding work per replica, within
    [min_replicas, max_replicas]. Scale *down* only when there is no work at all: Serve picks
    which replica to stop, and stopping one that holds a lease would stall its item until the
    lease expires. Between iterations (no work) the current count is kept; Serve's downscale
    delay then removes replicas that stay idle for long. With no metrics yet (``pending`` is
    NaN) the current count is kept too.
    """
    if min_replicas < 0 or max_replicas < max(1, min_replicas) or items_per_replica <= 0:
        raise ValueError(
            f"bad bounds: min {min_replicas}, max {max_replicas}, per replica {items_per_replica}"
        )
    if math.isnan(pending) or math.isnan(leased):
        return max(min_replicas, min(max_replicas, current))
    work = pending + leased
    want = math.ceil(work / items_per_replica)
    if work > 0:
        want = max(want, current)  # never stop a replica while work is outstanding
    return max(min_replicas, min(max_replicas, want))
