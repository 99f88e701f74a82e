"""A local multi-node Ray whose spot nodes come and go as a trace says (``--spot-trace``).

The head node plays the on-demand part of cluster.yaml (``control``, ``on_demand``, the
trainer's ``trainer_gpu``, and one on-demand ``sampler_gpu`` for the spill replica); each spot
node is a separate raylet (``ray.cluster_utils.Cluster``) offering ``spot`` and one
``sampler_gpu``. :class:`spotlight.scheduling.traces.TraceInjector` decides when nodes get a notice
(a Ray drain with a deadline, reason preemption), go, or come back; this module only carries it out.
``Cluster.add_node`` must run on the main thread, so the controller ticks the injector from its
wait loop.
"""

from __future__ import annotations

import time
from typing import Any, TextIO

from spotlight.ports import free_port
from spotlight.scheduling import resources
from spotlight.scheduling.traces import TraceInjector, load_trace, replay_events

DASHBOARD_PORT = 8265
"""Ray's dashboard port, used when free: another local Ray on this machine (a second job, or
a test beside this one) may hold it, and ``Cluster`` does not move on to the next port by
itself as ``ray.init`` does."""


class LocalSpotCluster:
    """Spot nodes of a ``ray.cluster_utils.Cluster``, by slot (the trace's node numbers)."""

    def __init__(
        self,
        head_cpus: int,
        head_resources: dict[str, float],
        spot_cpus: int = 1,
        sampler_per_node: int = 1,
    ):
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": head_cpus,
                "resources": head_resources,
                # the State API (Ray Train's placement-group cleaner polls it) needs it
                "include_dashboard": True,
                "dashboard_host": "127.0.0.1",
                "dashboard_port": free_port(DASHBOARD_PORT),
            },
        )
        self.spot_cpus = spot_cpus
        self.sampler_per_node = sampler_per_node
        """``sampler_gpu`` units per spot node: one replica of that SP degree."""
        self.nodes: dict[int, Any] = {}

    @property
    def address(self) -> str:
        return self.cluster.address

    def add(self, slot: int) -> None:
        self.nodes[slot] = self.cluster.add_node(
            num_cpus=self.spot_cpus,
            resources={
                resources.RESOURCE_SPOT: 1.0,
                resources.RESOURCE_SAMPLER: float(self.sampler_per_node),
            },
        )

    def node_id(self, slot: int) -> str:
        return self.nodes[slot].node_id

    def drain(self, slot: int, deadline_unix_s: float) -> None:
        from spotlight.deployments.node import drain_node

        drain_node(self.node_id(slot), deadline_unix_s, f"spot trace: node {slot} preempted")

    def remove(self, slot: int, graceful: bool) -> None:
        node = self.nodes.pop(slot)
        self.cluster.remove_node(node, allow_graceful=graceful)

    def shutdown(self) -> None:
        self.cluster.shutdown()


def head_resources(num_train_workers: int, spill: bool, sampler_gpus: int = 1) -> dict[str, float]:
    """The head's virtual resources in trace mode (no ``spot``): with ``spill``, room for one
    sampler replica of ``sampler_gpus``."""
    return {
        resources.RESOURCE_ON_DEMAND: 1.0,
        resources.RESOURCE_CONTROL: 1.0,
        resources.RESOURCE_TRAINER: float(num_train_workers),
        **({resources.RESOURCE_SAMPLER: float(sampler_gpus)} if spill else {}),
    }


def build_injector(
    cluster: LocalSpotCluster,
    trace_path: str,
    max_nodes: int,
    time_scale: float,
    notice_s: float,
    hard_share: float,
    seed: int,
    start_s: float | None = None,
    log: TextIO | None = None,
) -> TraceInjector:
    """The injector for ``trace_path`` scaled to ``max_nodes`` spot nodes. The replay starts at
    ``start_s`` of the trace, by default where it first has capacity."""
    trace = load_trace(trace_path).scaled(max_nodes)
    if trace.max_count == 0:
        raise ValueError(f"trace {trace_path} never has spot capacity")
    if start_s is None:
        start_s = next(t for t, c in zip(trace.times_s, trace.counts, strict=True) if c > 0)
    trace = trace.window(start_s)
    events = replay_events(trace, time_scale, notice_s, hard_share, seed)
    if log is not None:
        lost = trace.preemptions()
        print(
            f"[spotlight] spot trace {trace.name}: from {start_s / 3600:.1f} h, {time_scale:g}x"
            f" faster, up to {max_nodes} spot node(s), {lost} preemption(s) over"
            f" {trace.duration_s / time_scale / 60:.1f} min of replay",
            file=log,
            flush=True,
        )
    return TraceInjector(events, cluster, start_unix_s=time.time())
