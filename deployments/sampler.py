"""Serve deployments: DiT sampling replicas (on spot capacity) and the reward scorer.

A :class:`SamplerReplica` does not wait for requests: a background thread *pulls* work items
from the ``RequestQueue`` actor, makes sure it holds the item's weights version (fetched from the
``WeightBroadcast`` actor and checksum-verified), samples the item's (prompt, seed) pairs, has
the :class:`RewardScorer` deployment score the images, and completes the item in the queue. So a
fast replica takes more items than a slow one, and a replica that vanishes only loses its leases
(which expire and return its items to the queue).

Placement: replicas ask for one ``sampler_gpu`` (plus a GPU on a cluster); cluster.yaml offers it
on spot nodes first and on the on-demand fallback type at lower priority. Each replica reports
which pool it landed on, for the cost ledger.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import ray
from ray import serve

from spotlight.actors.names import RESOURCE_SPOT


@dataclass
class ReplicaSpec:
    """What a sampler replica needs to build its policy and pull work."""

    policy: dict[str, Any]
    """``PolicyConfig`` fields; the weights come from the broadcast."""
    sampler: dict[str, Any]
    """``SamplerConfig`` fields (items carry no sampler settings: one run, one sampler)."""
    threads: int = 1
    """torch threads per replica."""
    device: str = "cpu"
    max_items: int = 1
    """Items leased per pull."""
    pull_wait_s: float = 1.0
    """Long-poll: an empty pull waits this long for work (it returns as soon as work comes)."""
    stop_timeout_s: float = 15.0
    """On a graceful stop, wait this long for the item in hand (below Serve's 20 s default)."""
    heartbeat_s: float = 2.0
    """Lease heartbeat and queue-depth refresh interval."""
    extra: dict[str, Any] = field(default_factory=dict)


def node_pool() -> str:
    """'spot' when this process runs on a node offering the ``spot`` resource."""
    node_id = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node["NodeID"] == node_id:
            return "spot" if node.get("Resources", {}).get(RESOURCE_SPOT, 0) > 0 else "on_demand"
    return "on_demand"


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 1})
class RewardScorer:
    """Scores images with a named reward (``spotlight.rewards``)."""

    def __init__(self, reward: str, threads: int = 1):
        import torch

        from spotlight.rewards import build_reward

        torch.set_num_threads(threads)
        self._reward = build_reward(reward)
        self.name = reward

    def __call__(self, images, prompts: list[str]) -> list[float]:
        return [float(r) for r in self._reward(images, prompts)]


@serve.deployment(ray_actor_options={"num_cpus": 1})
class SamplerReplica:
    """Pulls items, samples them with the item's weights version, completes them."""

    def __init__(self, spec: ReplicaSpec, reward_handle):
        import torch

        from spotlight.actors.handles import get_actors
        from spotlight.config import PolicyConfig, SamplerConfig
        from spotlight.policies import make_policy

        torch.set_num_threads(spec.threads)
        self.spec = spec
        self._sampler_cfg = SamplerConfig(**spec.sampler)
        self._policy = make_policy(PolicyConfig(**spec.policy), spec.device)
        self._reward = reward_handle
        self._actors = get_actors()
        ctx = serve.get_replica_context()
        self.worker_id = f"{ctx.replica_id.unique_id}@{os.getpid()}"
        self.pool = node_pool()
        self.version: tuple[int, str] | None = None
        """(version, sha256) of the loaded weights."""
        self.counters = {"items": 0, "samples": 0, "busy_s": 0.0, "weights_loads": 0}
        self.weights_load_s: list[float] = []
        self.started_at = time.time()
        self._error: str | None = None
        self._queue_depth = (0, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pull-loop", daemon=True)
        self._thread.start()

    # -- Serve-facing --------------------------------------------------------------------
    def __call__(self) -> dict[str, Any]:
        return self.status()

    def status(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id,
            "pool": self.pool,
            "version": self.version[0] if self.version else None,
            "started_at": self.started_at,
            "error": self._error,
            "weights_load_s": list(self.weights_load_s),
            **self.counters,
        }

    def record_autoscaling_stats(self) -> dict[str, float]:
        """Custom autoscaling metrics (deployments/scaling.py): the queue's depth."""
        return {
            "queue_pending": float(self._queue_depth[0]),
            "queue_leased": float(self._queue_depth[1]),
        }

    def check_health(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"sampler pull loop failed: {self._error}")

    def __del__(self):
        """Graceful stop (Serve scaling down or moving the replica): finish the item in hand,
        then hand back any other lease, so no item waits for its lease to expire."""
        self._stop.set()
        self._thread.join(timeout=self.spec.stop_timeout_s)
        with contextlib.suppress(Exception):
            ray.get(self._actors.queue.release.remote(self.worker_id), timeout=5)

    # -- The pull loop ---------------------------------------------------------------------
    def _run(self) -> None:
        queue = self._actors.queue
        last_beat = 0.0
        try:
            while not self._stop.is_set():
                if time.monotonic() - last_beat > self.spec.heartbeat_s:
                    queue.heartbeat.remote(self.worker_id)
                    stats = ray.get(queue.stats.remote())
                    self._queue_depth = (stats["pending"], stats["leased"])
                    last_beat = time.monotonic()
                pull = queue.pull.remote(
                    self.worker_id, self.spec.max_items, None, self.pool, self.spec.pull_wait_s
                )
                items = ray.get(pull)
                for item in items:
                    ray.get(queue.complete.remote(self._process(item)))
        except Exception:  # surfaced through check_health(): Serve restarts the replica
            self._error = traceback.format_exc()
            with contextlib.suppress(Exception):
                ray.get(queue.release.remote(self.worker_id))

    def _ensure_version(self, version: int) -> None:
        """Load ``version`` unless already loaded (same number *and* checksum: a restarted
        trainer may publish a version number again)."""
        from spotlight.actors.weight_broadcast import fetch_weights

        header = ray.get(self._actors.broadcast.header.remote(version))
        if header is not None and self.version == (version, header.sha256):
            return
        t0 = time.perf_counter()
        header, state = fetch_weights(self._actors.broadcast, version)
        self._policy.load_state_dict(state)
        self.version = (version, header.sha256)
        self.counters["weights_loads"] += 1
        self.weights_load_s.append(time.perf_counter() - t0)

    def _process(self, item):
        import torch

        from spotlight.sampler import sample
        from spotlight.work_queue import ItemResult

        t0 = time.perf_counter()
        loads = self.counters["weights_loads"]
        self._ensure_version(item.weights_version)
        load_s = self.weights_load_s[-1] if self.counters["weights_loads"] > loads else 0.0
        trajs = sample(
            self._policy,
            list(item.prompts),
            list(item.seeds),
            self._sampler_cfg,
            item.weights_version,
        )
        images = self._policy.decode(torch.stack([tr.latents for tr in trajs]))
        rewards = self._reward.remote(images, list(item.prompts)).result()
        busy = time.perf_counter() - t0
        self.counters["items"] += 1
        self.counters["samples"] += len(trajs)
        self.counters["busy_s"] += busy
        keep = item.kind != "val"  # validation needs only the rewards
        return ItemResult(
            item_id=item.item_id,
            worker_id=self.worker_id,
            pool=self.pool,
            rewards=[float(r) for r in rewards],
            trajectories=[tr.to_bytes() for tr in trajs] if keep else [],
            busy_s=busy,
            weights_load_s=load_s,
            images=None if keep else images,
        )
