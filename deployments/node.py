"""What a replica knows and does about the node it runs on: its pool (spot or on-demand), the
drains under way, a drain for a preemption notice, and idle CPU priority."""

from __future__ import annotations

import contextlib
import os
import threading

import ray

from spotlight.scheduling.resources import RESOURCE_SPOT
from spotlight.scheduling.work_queue import Pool


def idle_thread_priority() -> None:
    """Give the calling thread idle scheduling priority (Linux ``SCHED_IDLE``, else nice 19):
    it runs whenever the CPU would idle and yields to every other process, so the trainer
    keeps its cores. Threads and processes it starts (Tesseract) inherit it. No privilege is
    needed to lower a priority; never raises."""
    tid = threading.get_native_id()
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        return
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, tid, 19)


def node_pool() -> str:
    """'spot' when this process runs on a node offering the ``spot`` resource."""
    node_id = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node["NodeID"] == node_id:
            spot = node.get("Resources", {}).get(RESOURCE_SPOT, 0) > 0
            return Pool.SPOT if spot else Pool.ON_DEMAND
    return Pool.ON_DEMAND


def draining_deadlines() -> dict[str, int]:
    """``{node_id_hex: deadline_ms}`` of the nodes being drained (0: no deadline). Uses Ray's
    private state API, as Serve and Train do (see RAY_NOTES)."""
    from ray._private.state import state

    return state.get_draining_nodes()


def drain_node(node_id: str, deadline_unix_s: float, message: str) -> bool:
    """Ask the GCS to drain ``node_id`` for a preemption, with a deadline; True if accepted."""
    from ray.core.generated import autoscaler_pb2

    gcs = ray._raylet.GcsClient(address=ray.get_runtime_context().gcs_address)
    accepted, _ = gcs.drain_node(
        node_id,
        autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
        message,
        int(deadline_unix_s * 1000),
    )
    return bool(accepted)
