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

Preemptions: a replica samples an item step by step and commits the item's in-flight state (every
trajectory after step k: latents, generator state, weights version, recorded path) to the queue
every ``commit_every`` steps, so a replica that dies without warning loses at most that many
steps per item (its lease expires and another replica resumes from the commit). A watcher thread
looks for a notice: a drain of its node requested through Ray (the trace injector, Serve, an
operator, or another replica's watcher) or, when ``notice_sources`` names clouds, the instance
metadata (spotlight/scheduling/notices.py), which it turns into a drain of the node with the
deadline less ``drain_margin_s``. On a notice the replica stops pulling, commits each item in hand
at its current step, hands the items back and idles until its node goes. A graceful stop does the
same.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

import ray
from ray import serve

from spotlight.deployments.node import (
    drain_node,
    draining_deadlines,
    idle_thread_priority,
    node_pool,
)

logger = logging.getLogger("ray.serve")


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
    """Lease heartbeat and queue-depth refresh interval (from the watcher thread, so it goes
    on through long steps and weights loads)."""
    commit_every: int = 0
    """Commit an item's in-flight state every this many steps (0: only on a notice)."""
    notice_poll_s: float = 1.0
    """How often the watcher looks for a notice."""
    notice_sources: tuple[str, ...] = ()
    """Clouds whose instance metadata to poll ('aws', 'gcp'); Ray drains are always watched."""
    drain_margin_s: float = 10.0
    """A cloud notice drains the node this long before the cloud's deadline."""
    sp_degree: int = 1
    """SP group size: above 1 a sample is split over that many worker processes with Ulysses
    SP (spotlight/sp/elastic.py)."""
    sp_workers: int = 1
    """Worker processes (GPUs) the replica owns, grouped into SP groups of ``sp_degree``
    that share each item's samples; 1: the replica samples in its own process."""
    idle_priority: bool = False
    """Run the pull loop at idle CPU priority (:func:`idle_thread_priority`): where the
    replicas share the trainer's cores, the trainer keeps them, as on its own GPU. (SP worker
    processes, ``sp_degree > 1``, keep their priority.)"""
    merge_lora: bool = False
    """Sample with the LoRA adapters merged into the base weights (``RayOptions.merge_lora``;
    in this process: SP worker processes sample unmerged)."""


def replica_actor_options(
    pool: str | None = None, workers: int = 1, gpu: bool = False, gpu_share: float = 1.0
) -> dict[str, Any]:
    """Ray actor options of a sampler replica: ``workers`` units of ``sampler_gpu`` (and with
    ``gpu`` as many GPUs, each ``gpu_share`` of one: below 1 where it shares its GPU with a
    trainer worker), pinned to ``pool``'s nodes ('spot' / 'on_demand') when given."""
    from spotlight.scheduling import resources

    resources: dict[str, float] = {resources.RESOURCE_SAMPLER: workers}
    if pool is not None:
        resources[pool] = 0.001
    num_gpus = workers * gpu_share if gpu else 0
    return {"num_cpus": 1, "num_gpus": num_gpus, "resources": resources}


def gpu_peak_gb() -> float | None:
    """This process's peak allocated CUDA memory in GB (None without CUDA)."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return torch.cuda.max_memory_allocated() / 1e9


# graceful_shutdown_wait_loop_s: on a stop, Serve looks for requests still running this often
# (its default, 2 s, held each app's delete about 2 s longer than the replicas needed)
@serve.deployment(ray_actor_options={"num_cpus": 1}, graceful_shutdown_wait_loop_s=0.2)
class SamplerReplica:
    """Pulls items, samples them with the item's weights version, completes them."""

    def __init__(self, spec: ReplicaSpec, reward_handle):
        import torch

        from spotlight.actors.handles import get_actors
        from spotlight.config import PolicyConfig, SamplerConfig
        from spotlight.policies import make_policy
        from spotlight.scheduling.storage import require_paths

        require_paths(
            ray.util.get_node_ip_address(),
            "sampler replica",
            {"policy.checkpoint": spec.policy.get("checkpoint")},
        )
        torch.set_num_threads(spec.threads)
        self.spec = spec
        self._sampler_cfg = SamplerConfig(**spec.sampler)
        self._policy = make_policy(PolicyConfig(**spec.policy), spec.device)
        self._merged = None
        """With ``merge_lora`` (and no SP workers), what loads versions merged."""
        if spec.merge_lora and max(spec.sp_workers, spec.sp_degree) == 1:
            from spotlight.policies.lora_merge import MergedLoRA

            self._merged = MergedLoRA(self._policy)
        self._sp = None
        """The replica's SP worker processes and groups, when it has more than one worker."""
        workers = max(spec.sp_workers, spec.sp_degree)
        self._reward = reward_handle
        self._actors = get_actors()
        ctx = serve.get_replica_context()
        self.node_id = ray.get_runtime_context().get_node_id()
        self.worker_id = f"{ctx.replica_id.unique_id}@{self.node_id[:8]}:{os.getpid()}"
        self.pool = node_pool()
        self.version: tuple[int, str] | None = None
        """(version, sha256) of the loaded weights."""
        self.counters = {
            "items": 0,
            "samples": 0,
            "busy_s": 0.0,
            "sampling_s": 0.0,
            "weights_loads": 0,
            "commits": 0,
            "items_handed_back": 0,
            "items_resumed": 0,
            "sp_regroups": 0,
            "sp_regrowths": 0,
            "sp_regrow_failures": 0,
        }
        if workers > 1:  # its own worker processes, one per GPU
            from spotlight.sp.replica_groups import ReplicaGroups

            heads = self._policy.transformer.config.num_attention_heads
            self._sp = ReplicaGroups(
                workers, spec.threads, spec.sp_degree, heads, self.counters, logger
            )
        self.weights_load_s: list[float] = []
        self.started_at = time.time()
        self._error: str | None = None
        self._queue_depth = (0, 0)
        self._last_beat = 0.0
        self._stop = threading.Event()
        """Set on a graceful stop or a notice: commit what is in hand, hand it back, stop."""
        self.notice: dict[str, Any] | None = None
        self._thread = threading.Thread(target=self._run, name="pull-loop", daemon=True)
        self._thread.start()
        self._watcher = threading.Thread(target=self._watch, name="notice-watch", daemon=True)
        self._watcher.start()

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
            "sp_regroup_s": list(self._sp.regroup_s) if self._sp is not None else [],
            "sp_regrow_s": list(self._sp.regrow_s) if self._sp is not None else [],
            "node_id": self.node_id,
            "notice": self.notice,
            "device": str(self._policy.device),
            "merged": self._merged is not None,
            "gpu_peak_gb": gpu_peak_gb(),
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
        """Graceful stop (Serve scaling down or moving the replica): commit the item in hand at
        its current step and hand it back, so no item waits for its lease to expire. A replica
        whose constructor failed has no pull loop: it only stops its SP workers, if it had
        started them (Serve logs the constructor's error, not a second one from here)."""
        if not hasattr(self, "_thread"):
            if getattr(self, "_sp", None) is not None:
                self._sp.shutdown()
            return
        self._stop.set()
        self._thread.join(timeout=self.spec.stop_timeout_s)
        with contextlib.suppress(Exception):
            ray.get(self._actors.queue.release.remote(self.worker_id), timeout=5)
        if self._sp is not None:
            self._sp.shutdown()

    # -- Notices -----------------------------------------------------------------------------
    def _watch(self) -> None:
        """Heartbeats (so a lease outlives a long step or weights load) and the notice watch:
        the first notice (a Ray drain of this node, or a cloud's) sets ``_stop``."""
        from spotlight.scheduling.notices import NoticeWatcher

        cloud = NoticeWatcher.for_clouds(list(self.spec.notice_sources))
        while self.notice is None:
            with contextlib.suppress(Exception):  # a failed beat or poll must not end the watch
                self._beat()
            try:
                found = self._notice_now(cloud)
            except Exception:
                found = None
            if found is not None:
                self.notice = {**found, "seen_at": time.time()}
                self._stop.set()
                return
            if self._stop.wait(self.spec.notice_poll_s) and self.notice is None:
                return  # a graceful stop

    def _notice_now(self, cloud) -> dict[str, Any] | None:
        from spotlight.scheduling.notices import node_notice

        found, drain_at = node_notice(
            self.node_id, draining_deadlines(), cloud, time.time(), self.spec.drain_margin_s
        )
        if found is None:
            return None
        if drain_at is not None:  # tell Ray (and so Serve and Train) the node is going
            drain_node(self.node_id, drain_at, f"{found.source} notice: {found.detail}")
        return {"source": found.source, "deadline": found.deadline_unix_s}

    # -- The pull loop ---------------------------------------------------------------------
    def _beat(self) -> None:
        """Extend this replica's leases and refresh the queue depth (autoscaling metric)."""
        if time.monotonic() - self._last_beat > self.spec.heartbeat_s:
            queue = self._actors.queue
            queue.heartbeat.remote(self.worker_id)
            stats = ray.get(queue.stats.remote())
            self._queue_depth = (stats["pending"], stats["leased"])
            self._last_beat = time.monotonic()

    def _run(self) -> None:
        if self.spec.idle_priority:
            idle_thread_priority()
        queue = self._actors.queue
        try:
            while not self._stop.is_set():
                pull = queue.pull.remote(
                    self.worker_id, self.spec.max_items, None, self.pool, self.spec.pull_wait_s
                )
                items = ray.get(pull)
                for k, item in enumerate(items):
                    if self._stop.is_set():  # a notice came: hand the rest back untouched
                        ray.get(queue.release.remote(self.worker_id, None, self.notice is not None))
                        self.counters["items_handed_back"] += len(items) - k
                        break
                    result = self._process(item)
                    if result is not None:
                        ray.get(queue.complete.remote(result))
            # Stopped: nothing may stay leased here (counts the notice once if there is one).
            ray.get(queue.release.remote(self.worker_id, None, self.notice is not None))
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
        if self._merged is not None:  # re-merged from the clean base weights
            self._merged.load(state)
        else:
            self._policy.load_state_dict(state)
        if self._sp is not None:  # the SP workers take the version through shared memory
            state = {k: v.detach().clone() for k, v in self._policy.state_dict().items()}
            self._sp.set_weights(state, self.spec.policy)
        self.version = (version, header.sha256)
        self.counters["weights_loads"] += 1
        self.weights_load_s.append(time.perf_counter() - t0)

    def _process(self, item):
        """Sample ``item`` (from its checkpoint, if it has one) step by step, committing every
        ``commit_every`` steps; returns its result, or None when a notice or a stop came first
        (the item's state is then committed and the item handed back)."""
        import torch

        from spotlight.flow.item_sampling import item_result, run_item, start_item

        t0 = time.perf_counter()
        loads = self.counters["weights_loads"]
        self._ensure_version(item.weights_version)
        if self._sp is not None and self._sp.lost:
            self._sp.regrow()
        load_s = self.weights_load_s[-1] if self.counters["weights_loads"] > loads else 0.0
        if item.resume is not None:
            self.counters["items_resumed"] += 1
        trajs = start_item(item, self._policy.latent_shape, self._sampler_cfg)
        start_step = trajs[0].step
        t_sample = time.perf_counter()
        trajs, finished = run_item(
            trajs,
            self._stepper(item),
            self.spec.commit_every,
            self._committer(item),
            stop=self._stop.is_set,
        )
        self.counters["sampling_s"] += time.perf_counter() - t_sample
        if not finished:  # notice or graceful stop: commit here, hand the item back
            self._hand_back(item, trajs, start_step)
            self.counters["busy_s"] += time.perf_counter() - t0
            return None
        images = self._policy.decode(torch.stack([tr.latents for tr in trajs]))
        rewards = self._reward.remote(images, list(item.prompts)).result()
        busy = time.perf_counter() - t0
        self.counters["items"] += 1
        self.counters["samples"] += len(trajs)
        self.counters["busy_s"] += busy
        return item_result(
            item,
            trajs,
            rewards,
            worker_id=self.worker_id,
            pool=self.pool,
            busy_s=busy,
            resumed_from_step=start_step,
            sp_degree=self._sp.group_degree if self._sp is not None else 1,
            weights_load_s=load_s,
            images=images,
        )

    def _stepper(self, item):
        """One denoising step of ``item``: in this process, or on the replica's SP groups
        (which encode the prompts themselves and return the trajectories' states)."""
        import torch

        from spotlight.flow.sampler import advance

        if self._sp is not None:
            return lambda trajs: self._sp.step(
                item.prompts, item.seeds, trajs, self.spec.sampler, item.weights_version
            )
        with torch.no_grad():
            cond = self._policy.encode_prompts(list(item.prompts))

        def step(trajs):
            advance(self._policy, trajs, 1, cond)
            return trajs

        return step

    def _committer(self, item):
        """Where ``item``'s periodic commits go: the queue, under this replica's lease."""

        def commit(state) -> None:
            ray.get(self._actors.queue.commit.remote(item.item_id, self.worker_id, state))
            self.counters["commits"] += 1

        return commit

    def _hand_back(self, item, trajs, start_step: int) -> None:
        """Release ``item`` with its state at the current step (unless no step was made here:
        the queue's checkpoint is then as far) and count the hand-back."""
        from spotlight.flow.item_sampling import checkpoint

        states = {}
        if trajs[0].step > start_step:
            states[item.item_id] = checkpoint(trajs)
            self.counters["commits"] += 1
        ray.get(self._actors.queue.release.remote(self.worker_id, states, self.notice is not None))
        if self.notice is not None:
            self.notice["committed_s"] = time.time() - self.notice["seen_at"]
        self.counters["items_handed_back"] += 1
