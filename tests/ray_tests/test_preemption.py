"""Fault injection on a real multi-node Ray (``ray.cluster_utils.Cluster``): spot nodes drained
with a notice, killed without one, and added back while items are in flight. Every item must
complete exactly once, bit-identical to sampling it in one go."""

from __future__ import annotations

import dataclasses
import os
import time

import pytest
import torch

from spotlight.actors import names
from spotlight.config import SamplerConfig
from spotlight.job.local_cluster import head_resources
from spotlight.scheduling import resources
from spotlight.scheduling.work_queue import SpillPolicy, WorkItem

pytestmark = pytest.mark.slow

SAMPLER = SamplerConfig(num_steps=60, eta=0.7, batch_size=4)
"""Long enough (about a second per item here) for nodes to go while items are in flight."""
LEASE_S = 4.0
SPOT = {resources.RESOURCE_SPOT: 1.0, resources.RESOURCE_SAMPLER: 1.0}


@pytest.fixture(scope="module")
def spot_cluster():
    import ray
    from ray.cluster_utils import Cluster

    # Notice node death in ~2 s instead of ~15 s (as Ray's own draining tests do).
    fast = {
        "RAY_health_check_period_ms": "500",
        "RAY_health_check_timeout_ms": "500",
        "RAY_health_check_failure_threshold": "3",
        "RAY_health_check_initial_delay_ms": "0",
    }
    saved = {k: os.environ.get(k) for k in fast}
    os.environ.update(fast)
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 3,
            "resources": head_resources(1, spill=False),
            "include_dashboard": False,
        },
    )
    nodes = [cluster.add_node(num_cpus=1, resources=SPOT) for _ in range(2)]
    ray.init(
        address=cluster.address,
        namespace=names.NAMESPACE,
        runtime_env={"env_vars": {"RAY_AUTH_MODE": "disabled"}},
    )
    yield cluster, nodes
    from ray import serve

    from spotlight.actors.handles import kill_actors

    serve.shutdown()
    kill_actors()
    ray.shutdown()
    cluster.shutdown()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _policy():
    from ray_tests.helpers import smoke
    from spotlight.policies import make_policy

    return make_policy(smoke().policy, "cpu"), smoke()


def _wait(what, cond, timeout_s=120.0, every_s=0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out waiting for {what}")


def test_items_survive_a_notice_a_hard_kill_and_a_node_coming_back(spot_cluster):
    import ray
    from ray import serve

    from spotlight.actors.handles import ensure_actors
    from spotlight.actors.weight_broadcast import publish_weights
    from spotlight.deployments.node import drain_node
    from spotlight.deployments.reward import reward_scorer
    from spotlight.deployments.sampler import ReplicaSpec, SamplerReplica, replica_actor_options
    from spotlight.flow.sampler import Trajectory, sample
    from spotlight.flow.weights import policy_bytes
    from spotlight.rewards import build_reward

    cluster, (node_a, node_b) = spot_cluster
    policy, cfg = _policy()
    actors = ensure_actors(lease_s=LEASE_S)
    q = actors.queue
    ray.get(q.open_run.remote("preemption-test"))
    ray.get(q.configure.remote(LEASE_S, SpillPolicy("never")))
    publish_weights(actors.broadcast, 0, 0, policy_bytes(policy))

    spec = ReplicaSpec(
        policy=dataclasses.asdict(cfg.policy),
        sampler=dataclasses.asdict(SAMPLER),
        commit_every=5,
        heartbeat_s=0.5,
        notice_poll_s=0.1,
    )
    reward = reward_scorer(cfg.reward)
    app = SamplerReplica.options(
        num_replicas=2,
        ray_actor_options=replica_actor_options(resources.RESOURCE_SPOT),
        health_check_period_s=1,
    ).bind(spec, reward)
    serve.run(app, name="preemption-test", route_prefix=None)

    items = [
        WorkItem(f"r-{k}", "rollout", 0, 0, ("a prompt", "another"), (100 + 2 * k, 101 + 2 * k))
        for k in range(8)
    ]
    ids = [it.item_id for it in items]
    ray.get(q.submit.remote(items))

    def in_flight_on(node):
        tag = node.node_id[:8]
        return [
            x for x in ray.get(q.leased.remote()) if tag in x["worker_id"] and x["committed_step"]
        ]

    # 1. A notice: node A is drained with a deadline while its item is past a commit.
    _wait("an item committed on node A", lambda: in_flight_on(node_a))
    t_notice = time.time()
    assert drain_node(node_a.node_id, t_notice + 30, "test: spot notice")
    _wait("node A's replica to hand its item back", lambda: ray.get(q.stats.remote())["notices"])
    notice_to_commit_s = time.time() - t_notice
    assert not in_flight_on(node_a)
    cluster.remove_node(node_a, allow_graceful=True)

    # 2. No notice: node B dies with an item in flight; its lease expires.
    _wait("an item committed on node B", lambda: in_flight_on(node_b))
    cluster.remove_node(node_b, allow_graceful=False)

    # 3. Capacity comes back: a new spot node; Serve places the replicas there.
    cluster.add_node(num_cpus=1, resources=SPOT)

    def all_done():
        found = ray.get(q.results.remote(ids))
        return found if len(found) == len(ids) else None

    done = _wait("every item", all_done, timeout_s=240, every_s=0.5)
    stats = ray.get(q.stats.remote())
    print(f"notice to committed and handed back: {notice_to_commit_s:.2f} s; queue {stats}")

    assert stats["notices"] == 1
    assert stats["leases_expired"] >= 1
    assert stats["items_resumed"] >= 2 and stats["steps_resumed"] >= 10
    assert stats["results"] == len(ids) and stats["pending"] == 0 and stats["leased"] == 0
    assert any(r.resumed_from_step > 0 for r in done.values())
    # Bit-identical to sampling each item in one go, in this process; same rewards.
    score = build_reward(cfg.reward)
    for it in items:
        ref = sample(policy, list(it.prompts), list(it.seeds), SAMPLER, 0)
        images = policy.decode(torch.stack([tr.latents for tr in ref]))
        assert done[it.item_id].rewards == [float(r) for r in score(images, list(it.prompts))]
        got = [Trajectory.from_bytes(b) for b in done[it.item_id].trajectories]
        for a, b in zip(got, ref, strict=True):
            assert a.step == b.step == SAMPLER.num_steps
            assert torch.equal(a.latents, b.latents)
            assert all(torch.equal(x, y) for x, y in zip(a.xs, b.xs, strict=True))
            assert a.log_probs == b.log_probs
    # Exactly once: a late completion of a finished item is refused.
    again = dataclasses.replace(done[ids[0]], worker_id="late")
    assert not ray.get(q.complete.remote(again))
    serve.delete("preemption-test")
