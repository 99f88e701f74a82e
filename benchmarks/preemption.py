"""What preemption handling costs and buys, measured on this machine.

python benchmarks/preemption.py --out docs/bench            # all parts, writes preemption.json
python benchmarks/preemption.py --out DIR --parts queue commit

Parts:

* ``makespan``: a rollout of 64 equal items on replicas of unequal speed (1, 1, 0.5, 0.25: a
  mix of GPU generations or SP degrees), pulled from the real ``WorkQueue`` against static round
  robin (``spotlight.scheduling.dispatch``, simulated time); and rollout items submitted after
  exploration items.
* ``queue``: the ``RequestQueue`` actor on a local Ray: items/s through submit -> pull ->
  complete -> results with two puller actors, against the same two actors called directly
  (push); the per-item overhead; the cost of one commit of the tiny-ocr checkpoint size.
* ``commit``: the real tiny-ocr sampler (policy, batch, steps of the default recipe) run with a
  commit every K steps (serializing every trajectory, as replicas do), timed step by step; then
  kills at 500 uniformly random times on that measured timeline give the work redone per
  preemption (time since the last commit) and the commit overhead per item, for each K.
* ``notice``: a ``ray.cluster_utils.Cluster`` with two spot nodes running sampler replicas
  (default notice polling, 1 s); a node is drained (a preemption notice) while it holds an item,
  five times: seconds from the drain to the item's state committed and handed back.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import statistics
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def part_makespan() -> dict:
    from spotlight.scheduling.dispatch import pull_schedule, round_robin_schedule
    from spotlight.scheduling.work_queue import WorkItem

    speeds = [1.0, 1.0, 0.5, 0.25]
    its = [WorkItem(f"rollout-{i}", "rollout", 0, 0, ("p",), (i,)) for i in range(64)]
    cost = {i.item_id: 1.0 for i in its}
    pull = pull_schedule(its, cost, speeds)
    rr = round_robin_schedule(its, cost, speeds)
    explore = [WorkItem(f"explore-{i}", "explore", 0, 0, ("p",), (i,)) for i in range(64)]
    cost.update({i.item_id: 1.0 for i in explore})
    mixed = pull_schedule(explore + its, cost, speeds)
    # the same without priorities: the other 64 items as early rollout items (FIFO)
    early = [WorkItem(f"x-{i}", "rollout", 0, 0, ("p",), (i,)) for i in range(64)]
    cost.update({i.item_id: 1.0 for i in early})
    fifo = pull_schedule(early + its, cost, speeds)
    out = {
        "speeds": speeds,
        "items": len(its),
        "item_cost_s": 1.0,
        "pull_makespan_s": pull.makespan_s,
        "pull_items_per_replica": pull.worker_items,
        "round_robin_makespan_s": rr.makespan_s,
        "round_robin_items_per_replica": rr.worker_items,
        "speedup": rr.makespan_s / pull.makespan_s,
        "ideal_makespan_s": len(its) / sum(speeds),
        "rollout_makespan_with_64_exploration_items_queued_first_s": mixed.makespan_of("rollout"),
        "rollout_makespan_same_but_fifo_s": fifo.makespan_of("rollout"),
    }
    print(
        f"[makespan] pull {pull.makespan_s:.2f} s vs round robin {rr.makespan_s:.2f} s"
        f" ({out['speedup']:.2f}x; ideal {out['ideal_makespan_s']:.2f} s); rollout behind"
        f" exploration: {out['rollout_makespan_with_64_exploration_items_queued_first_s']:.2f} s"
        f" (FIFO: {out['rollout_makespan_same_but_fifo_s']:.2f} s)"
    )
    return out


def _tiny_ocr_checkpoint():
    """One tiny-ocr item's trajectories after half its steps, as a replica commits them."""
    from spotlight.flow.sampler import advance, start_trajectory
    from spotlight.policies import make_policy
    from spotlight.recipes import get_recipe

    cfg = get_recipe("tiny-ocr")
    policy = make_policy(cfg.policy, "cpu")
    prompts = ['an image of the word "cat"'] * cfg.sampler.batch_size
    trajs = [
        start_trajectory(p, s, policy.latent_shape, cfg.sampler) for s, p in enumerate(prompts)
    ]
    return cfg, policy, prompts, trajs, advance


def part_queue(n: int = 2000) -> dict:
    import ray

    from spotlight.actors.request_queue import RequestQueue
    from spotlight.scheduling.work_queue import ItemCheckpoint, ItemResult, WorkItem

    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:

        @ray.remote(num_cpus=0)
        class Puller:
            def __init__(self, name, queue):
                self.name, self.q = name, queue

            def drain(self) -> int:
                done = 0
                while True:
                    got = ray.get(self.q.pull.remote(self.name, 1, None, "spot", 0.2))
                    if not got:
                        return done
                    for it in got:
                        ray.get(
                            self.q.complete.remote(ItemResult(it.item_id, self.name, "spot", [0.0]))
                        )
                        done += 1

            def direct(self, item) -> ItemResult:
                return ItemResult(item.item_id, self.name, "spot", [0.0])

        q = RequestQueue.remote(120.0)
        ray.get(q.open_run.remote("bench"))
        pullers = [Puller.remote(f"w{i}", q) for i in range(2)]
        items = [WorkItem(f"i{k}", "rollout", 0, 0, ("p",), (k,)) for k in range(n)]
        # warm up
        ray.get(q.submit.remote(items[:50]))
        ray.get([p.drain.remote() for p in pullers])
        ray.get(q.forget.remote([it.item_id for it in items[:50]]))
        ray.get(q.open_run.remote("bench-2"))
        t0 = time.perf_counter()
        ray.get(q.submit.remote(items))
        ray.get([p.drain.remote() for p in pullers])
        got = ray.get(q.results.remote([it.item_id for it in items]))
        queue_s = time.perf_counter() - t0
        assert len(got) == n
        t0 = time.perf_counter()
        refs = [pullers[k % 2].direct.remote(it) for k, it in enumerate(items)]
        ray.get(refs)
        direct_s = time.perf_counter() - t0
        # one commit of a tiny-ocr item's state at mid-rollout
        cfg, policy, _, trajs, advance = _tiny_ocr_checkpoint()
        advance(policy, trajs, cfg.sampler.num_steps // 2)
        ck = ItemCheckpoint(trajs[0].step, tuple(t.to_bytes() for t in trajs))
        one = WorkItem(
            "c", "rollout", 0, 0, tuple(t.prompt for t in trajs), tuple(t.seed for t in trajs)
        )
        ray.get(q.open_run.remote("bench-3"))
        ray.get(q.submit.remote([one]))
        ray.get(q.pull.remote("w", 1))
        times = []
        for _ in range(30):
            t1 = time.perf_counter()
            ray.get(q.commit.remote("c", "w", ck))
            times.append(time.perf_counter() - t1)
        out = {
            "items": n,
            "pullers": 2,
            "queue_items_per_s": n / queue_s,
            "direct_items_per_s": n / direct_s,
            "queue_ms_per_item": 1000 * queue_s / n,
            "direct_ms_per_item": 1000 * direct_s / n,
            "commit_bytes": ck.nbytes,
            "commit_ms_median": 1000 * statistics.median(times),
        }
    finally:
        ray.shutdown()
    print(
        f"[queue] {out['queue_items_per_s']:.0f} items/s through the queue"
        f" ({out['queue_ms_per_item']:.2f} ms/item) vs {out['direct_items_per_s']:.0f} direct"
        f" ({out['direct_ms_per_item']:.2f} ms/item); one commit of"
        f" {out['commit_bytes'] / 1e3:.0f} kB: {out['commit_ms_median']:.2f} ms"
    )
    return out


def part_commit(
    ks: tuple[int, ...] = (0, 1, 2, 4, 5), kills: int = 500, commit_ms: float = 0.0
) -> dict:
    import torch

    from spotlight.scheduling.work_queue import ItemCheckpoint

    torch.set_num_threads(1)
    rng = random.Random(0)
    rows = []
    for k in ks:
        cfg, policy, prompts, trajs, advance = _tiny_ocr_checkpoint()
        with torch.no_grad():
            cond = policy.encode_prompts(prompts)
        t0 = time.perf_counter()
        commits_at = [0.0]  # the item's start is a commit point (nothing to redo before it)
        commit_s = 0.0
        nbytes = 0
        while not trajs[0].done:
            advance(policy, trajs, 1, cond)
            if k and trajs[0].step % k == 0 and not trajs[0].done:
                c0 = time.perf_counter()
                ck = ItemCheckpoint(trajs[0].step, tuple(t.to_bytes() for t in trajs))
                nbytes += ck.nbytes
                commit_s += time.perf_counter() - c0 + commit_ms / 1000
                commits_at.append(time.perf_counter() - t0 + commit_ms / 1000)
        total = time.perf_counter() - t0 + (len(commits_at) - 1) * commit_ms / 1000
        lost = []
        for _ in range(kills):
            t = rng.uniform(0, total)
            lost.append(t - max(c for c in commits_at if c <= t))
        rows.append(
            {
                "commit_every": k,
                "item_s": total,
                "commits": len(commits_at) - 1,
                "commit_bytes_per_item": nbytes,
                "commit_overhead_s_per_item": commit_s,
                "redone_s_per_preemption_mean": statistics.fmean(lost),
                "redone_share_of_item_mean": statistics.fmean(lost) / total,
            }
        )
        r = rows[-1]
        print(
            f"[commit] K={k or 'notice only'}: item {total:.3f} s, {r['commits']} commits"
            f" ({nbytes / 1e3:.0f} kB, {commit_s * 1000:.1f} ms), redone per hard preemption"
            f" {r['redone_s_per_preemption_mean']:.3f} s"
            f" ({100 * r['redone_share_of_item_mean']:.0f}% of an item)"
        )
    return {
        "recipe": "tiny-ocr",
        "num_steps": cfg.sampler.num_steps,
        "batch_size": cfg.sampler.batch_size,
        "kills": kills,
        "commit_round_trip_ms_added": commit_ms,
        "by_k": rows,
    }


def part_notice(repeats: int = 5) -> dict:
    import ray
    from ray import serve
    from ray.cluster_utils import Cluster

    from spotlight.actors import names
    from spotlight.actors.handles import ensure_actors, kill_actors
    from spotlight.actors.weight_broadcast import publish_weights
    from spotlight.config import SamplerConfig
    from spotlight.deployments.node import drain_node
    from spotlight.deployments.reward import reward_scorer
    from spotlight.deployments.sampler import ReplicaSpec, SamplerReplica, replica_actor_options
    from spotlight.flow.weights import policy_bytes
    from spotlight.job.local_cluster import head_resources
    from spotlight.policies import make_policy
    from spotlight.recipes import get_recipe
    from spotlight.scheduling import resources
    from spotlight.scheduling.work_queue import SpillPolicy, WorkItem

    os.environ.update(
        {
            "RAY_health_check_period_ms": "500",
            "RAY_health_check_timeout_ms": "500",
            "RAY_health_check_failure_threshold": "3",
            "RAY_health_check_initial_delay_ms": "0",
        }
    )
    spot = {resources.RESOURCE_SPOT: 1.0, resources.RESOURCE_SAMPLER: 1.0}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 3,
            "resources": head_resources(1, False),
            "include_dashboard": False,
        },
    )
    nodes = [cluster.add_node(num_cpus=1, resources=spot) for _ in range(2)]
    ray.init(address=cluster.address, namespace=names.NAMESPACE, log_to_driver=False)
    times = []
    try:
        cfg = get_recipe("tiny-smoke")
        sampler = SamplerConfig(num_steps=200, eta=0.7, batch_size=4)
        policy = make_policy(cfg.policy, "cpu")
        actors = ensure_actors(lease_s=30.0)
        q = actors.queue
        ray.get(q.open_run.remote("notice-bench"))
        ray.get(q.configure.remote(30.0, SpillPolicy("never")))
        publish_weights(actors.broadcast, 0, 0, policy_bytes(policy))
        spec = ReplicaSpec(
            policy=dataclasses.asdict(cfg.policy), sampler=dataclasses.asdict(sampler)
        )
        reward = reward_scorer(cfg.reward)
        app = SamplerReplica.options(
            num_replicas=2,
            ray_actor_options=replica_actor_options(resources.RESOURCE_SPOT),
        ).bind(spec, reward)
        serve.run(app, name="notice-bench", route_prefix=None)
        ray.get(
            q.submit.remote(
                [
                    WorkItem(f"r{k}", "rollout", 0, 0, ("p",) * 4, tuple(range(4 * k, 4 * k + 4)))
                    for k in range(400)
                ]
            )
        )
        for rep in range(repeats):
            node = nodes[rep % 2]
            tag = node.node_id[:8]
            deadline = time.monotonic() + 120
            while not any(
                tag in x["worker_id"] and x["committed_step"] == 0
                for x in ray.get(q.leased.remote())
            ):
                if time.monotonic() > deadline:
                    raise TimeoutError("no item in flight on the node")
                time.sleep(0.05)
            time.sleep(random.Random(rep).uniform(0.1, 0.5))  # somewhere mid-item
            before = ray.get(q.stats.remote())["released"]
            t0 = time.perf_counter()
            drain_node(node.node_id, time.time() + 30, "bench notice")
            while ray.get(q.stats.remote())["released"] == before:
                time.sleep(0.01)
            times.append(time.perf_counter() - t0)
            print(
                f"[notice] {rep + 1}/{repeats}: drain -> committed and handed back in"
                f" {times[-1]:.3f} s"
            )
            cluster.remove_node(node, allow_graceful=True)
            nodes[rep % 2] = cluster.add_node(num_cpus=1, resources=spot)
        return {
            "repeats": repeats,
            "notice_poll_s": ReplicaSpec.notice_poll_s,
            "notice_to_committed_s": times,
            "notice_to_committed_s_median": statistics.median(times),
        }
    finally:
        serve.shutdown()
        kill_actors()
        ray.shutdown()
        cluster.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", nargs="+", default=["makespan", "queue", "commit", "notice"])
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "preemption.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    commit_ms = doc.get("queue", {}).get("commit_ms_median", 0.0)
    for part in args.parts:
        if part == "makespan":
            doc["makespan"] = part_makespan()
        elif part == "queue":
            doc["queue"] = part_queue()
            commit_ms = doc["queue"]["commit_ms_median"]
        elif part == "commit":
            doc["commit"] = part_commit(commit_ms=commit_ms)
        elif part == "notice":
            doc["notice"] = part_notice()
        else:
            raise SystemExit(f"unknown part {part!r}")
        path.write_text(json.dumps(doc, indent=1))
    print(f"-> {path}")


if __name__ == "__main__":
    main()
