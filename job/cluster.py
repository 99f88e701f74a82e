"""Joining a Ray cluster (or starting the local one), checking its capacity, cleaning up."""

from __future__ import annotations

import contextlib
import os
import time
from typing import TextIO

from spotlight import progress
from spotlight.job.options import RayOptions, local_resources


def connect(opts: RayOptions, log: TextIO | None = None):
    """Join the cluster (or start the local one). Returns ``(started_here, injector)``: whether
    Ray was started here, and the spot-trace injector (``opts.spot_trace``) or None."""
    import ray

    from spotlight.actors.names import NAMESPACE

    address = opts.address or os.environ.get("RAY_ADDRESS")
    if ray.is_initialized():
        return False, None
    env = {"env_vars": {"PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}}
    if opts.spot_trace is not None:
        if address:
            raise ValueError(
                "--spot-trace replays a trace on a local multi-node Ray; on a cluster the"
                " preemptions are real (unset RAY_ADDRESS to replay one locally)"
            )
        from spotlight.job.local_cluster import LocalSpotCluster, build_injector, head_resources

        cluster = LocalSpotCluster(
            head_cpus=opts.num_train_workers + 3,
            head_resources=head_resources(
                opts.num_train_workers, opts.spill != "never", opts.workers_per_replica
            ),
            sampler_per_node=opts.workers_per_replica,
        )
        injector = build_injector(
            cluster,
            opts.spot_trace,
            max_nodes=opts.num_samplers,
            time_scale=opts.trace_time_scale,
            notice_s=opts.trace_notice_s,
            hard_share=opts.trace_hard_share,
            seed=opts.trace_seed,
            start_s=opts.trace_start_s,
            log=log,
        )
        injector.tick(time.time())  # the nodes the trace starts with
        # Removed nodes make Ray print their raylets' last words: ray_logs routes them to the
        # run folder's ray.log.
        ray.init(address=cluster.address, namespace=NAMESPACE, runtime_env=env)
        return True, injector
    if address:
        ray.init(address=address, namespace=NAMESPACE, runtime_env=env, log_to_driver=True)
        return False, None
    ray.init(
        address="local",  # a new local Ray, never a cluster some other process left running
        num_cpus=opts.num_samplers + opts.num_train_workers + 2,
        resources=local_resources(opts),
        namespace=NAMESPACE,
        # Ray Train's placement-group cleaner polls the State API, which the dashboard serves:
        # without it, it logs "Failed to query Ray Train Controller actor state" every second.
        include_dashboard=True,
        dashboard_host="127.0.0.1",  # this machine only (another port if 8265 is taken)
        runtime_env=env,
    )
    return True, None


def check_capacity(opts: RayOptions, autoscaling: bool = False, log: TextIO | None = None) -> None:
    """Refuse a cluster that cannot host samplers or the trainer, before any work starts.

    A cluster must mark its nodes ``spot`` / ``on_demand`` (cluster.yaml). On an autoscaling
    cluster, missing sampler or trainer capacity is only reported: pending Serve replicas and
    Train workers are what make the autoscaler add those nodes.
    """
    import ray

    from spotlight.actors import names

    res = ray.cluster_resources()
    if res.get(names.RESOURCE_SPOT, 0) <= 0 and res.get(names.RESOURCE_ON_DEMAND, 0) <= 0:
        raise ValueError(
            "this Ray cluster cannot run the job: no node offers the 'spot' or 'on_demand'"
            " resource (start it from cluster.yaml, or mark nodes with"
            " `ray start --resources '{\"on_demand\": 1, ...}'`)"
        )
    missing = []
    if res.get(names.RESOURCE_SAMPLER, 0) < opts.workers_per_replica:
        missing.append(
            f"'{names.RESOURCE_SAMPLER}' capacity {res.get(names.RESOURCE_SAMPLER, 0):g} is less"
            f" than one sampler replica needs ({opts.workers_per_replica}: its SP workers; spot or"
            " on-demand sampler nodes, see cluster.yaml)"
        )
    if res.get(names.RESOURCE_TRAINER, 0) < opts.num_train_workers:
        missing.append(
            f"'{names.RESOURCE_TRAINER}' capacity {res.get(names.RESOURCE_TRAINER, 0):g} is less"
            f" than the {opts.num_train_workers} trainer workers asked for (on-demand trainer"
            " nodes; see cluster.yaml)"
        )
    if not missing:
        return
    if autoscaling:
        progress.line(log, "[spotlight] waiting for the autoscaler: " + "; ".join(missing))
        return
    raise ValueError("this Ray cluster cannot run the job: " + "; ".join(missing))


def cleanup() -> None:
    """Delete the Serve app and the detached actors (skipped with ``keep_cluster_state``)."""
    from ray import serve

    from spotlight.actors import names
    from spotlight.actors.handles import kill_actors

    with contextlib.suppress(Exception):
        serve.delete(names.SERVE_APP)
    kill_actors()
