"""Serve autoscaling policy of the sampler deployment: scale on the request queue's depth.

Sampler replicas pull their work, so Serve's default signal (ongoing requests per replica) is
always zero for them. Instead each replica reports the queue's depth through
``record_autoscaling_stats`` and this policy asks for
:func:`spotlight.scheduling.scaling.desired_replicas`. On a cluster, replicas Serve cannot place
make the autoscaler ask for spot nodes (and, failing those, the lower-priority on-demand sampler
type).
"""

from __future__ import annotations

from typing import Any

from spotlight.scheduling.scaling import desired_replicas


def _latest(metric: dict | None) -> float:
    if not metric:
        return float("nan")
    return float(max(metric.values()))


def queue_depth_policy(ctx) -> tuple[int, dict[str, Any]]:
    """``policy_function`` for ``autoscaling_config``.

    ``ctx`` is a ``ray.serve.config.AutoscalingContext``.
    """
    metrics = ctx.aggregated_metrics or {}
    want = desired_replicas(
        _latest(metrics.get("queue_pending")),
        _latest(metrics.get("queue_leased")),
        ctx.target_num_replicas,  # not current: replicas still starting count too
        ctx.capacity_adjusted_min_replicas,
        ctx.capacity_adjusted_max_replicas,
    )
    return want, {}
