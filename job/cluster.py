"""Joining a Ray cluster (or starting the local one), checking its capacity, cleaning up."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import TextIO

from spotlight import interrupts, progress
from spotlight.job.options import RayOptions, local_resources
from spotlight.job.run_watch import CapacityWatch
from spotlight.scheduling.capacity import NodeType, job_roles, node_types, shortfalls

JOB_ENV = {
    "PYTHONUNBUFFERED": "1",
    "TOKENIZERS_PARALLELISM": "false",
    # Ray Train's controller polls its workers this often (Ray's default: 2 s); the end of the
    # trainer's loop and a worker's failure are noticed within it (a run's end took about 5 s
    # at 2 s on a local Ray). Each poll is one call per worker, kept by the GCS as a task
    # event: at 0.25 s the polls were 76% of the job's actor calls and the GCS grew 18.7 MB
    # per 100 iterations over the soak.
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "1.0",
}
"""Environment of the job's Ray workers (its runtime_env)."""


def connect(opts: RayOptions, log: TextIO | None = None):
    """Join the cluster (or start the local one). Returns ``(started_here, injector)``: whether
    Ray was started here, and the spot-trace injector (``opts.spot_trace``) or None."""
    import ray

    from spotlight.actors.names import NAMESPACE

    address = opts.address or os.environ.get("RAY_ADDRESS")
    if ray.is_initialized():
        return False, None
    env = {"env_vars": dict(JOB_ENV)}
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
        interrupts.rearm()  # ray.init replaced the SIGTERM handler
        return True, injector
    if address:
        ray.init(address=address, namespace=NAMESPACE, runtime_env=env, log_to_driver=True)
        interrupts.rearm()
        return False, None
    init_local(
        ray,
        log,
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
    interrupts.rearm()
    return True, None


RAY_NODE_TIMEOUT = "timed out during startup"
"""What ``ray.init`` raises when the raylet it started has not registered within Ray's own wait
(30 s in Ray 2.60, with no setting): seen on a 2-core machine that two other Ray clusters and a
test suite kept busy."""


def init_local(ray, log: TextIO | None, **kwargs) -> None:
    """``ray.init(**kwargs)`` for a new local Ray, tried once more when the node timed out during
    startup: the processes the failed start left behind (this process's children that were not
    there before it) are stopped first. Any other error, or a second timeout, is raised."""
    import psutil

    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    try:
        ray.init(**kwargs)
        return
    except Exception as e:
        if RAY_NODE_TIMEOUT not in str(e):
            raise
    left = [p for p in me.children(recursive=True) if p.pid not in before]
    progress.line(
        log,
        f"[spotlight] Ray's local node did not start in time (a busy machine?): stopping the"
        f" {len(left)} process(es) it left and starting it once more",
    )
    stop_processes(left)
    ray.shutdown()
    ray.init(**kwargs)


def stop_processes(procs: list, grace_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL for those still running after ``grace_s``."""
    import psutil

    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=grace_s)


def starts_local_ray(opts: RayOptions) -> bool:
    """Whether :func:`connect` will start a Ray on this machine (no Ray up in this process,
    no cluster address): then every role runs here. Ray is not imported for it."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return False
    return not (opts.address or os.environ.get("RAY_ADDRESS"))


def check_local_machine(opts: RayOptions) -> None:
    """On a local Ray, refuse a job this machine's cores or memory cannot hold, or ``--device
    cuda`` where torch sees no GPU (the GPUs themselves: ``job.placement.local_gpu_plan``; the CLI
    exits 2), before the run folder is written or Ray starts
    (:func:`spotlight.scheduling.machine.check_machine`)."""
    from spotlight.scheduling.machine import check_machine

    if starts_local_ray(opts):
        check_machine(
            opts.num_train_workers,
            opts.num_samplers,
            opts.workers_per_replica,
            opts.device,
        )


AUTOSCALER_CONFIG = "~/ray_bootstrap_config.yaml"
"""Where ``ray up`` leaves the cluster's full config on the head (the driver of a submitted job
runs there); ``SPOTLIGHT_CLUSTER_CONFIG`` names another file."""


def autoscaler_config() -> tuple[dict | None, str]:
    """The cluster launcher's config of the cluster the driver runs in, and its path (None
    where there is none: a local Ray, or nodes started by hand)."""
    import yaml

    name = os.environ.get("SPOTLIGHT_CLUSTER_CONFIG", AUTOSCALER_CONFIG)
    path = Path(name).expanduser()
    if not path.is_file():
        return None, name
    try:
        return yaml.safe_load(path.read_text()), name
    except (yaml.YAMLError, ValueError) as e:
        detail = " ".join(str(e).split())  # one line
        raise ValueError(f"{name}: not a YAML cluster config ({detail})") from None


def live_node_types() -> list[NodeType]:
    """Every live node as a node type of one: what a cluster without an autoscaler has."""
    import ray

    return [
        NodeType(f"node {n['NodeManagerAddress']}", n["Resources"], 1)
        for n in ray.nodes()
        if n["Alive"]
    ]


def check_capacity(
    opts: RayOptions,
    reward_gpus: float = 0.0,
    joined: bool = False,
    trace: bool = False,
    log: TextIO | None = None,
) -> None:
    """Refuse a job its cluster can never hold, before anything is deployed (the CLI exits 2).

    ``joined``: the driver joined a cluster. Where that cluster was started by ``ray up`` its
    autoscaler's node types, each at its ``max_workers``, are what the job is judged on, and
    capacity not up yet is only waited for (pending replicas and trainer workers are what make
    the autoscaler add nodes); elsewhere the live nodes are all there is. ``trace``: a local
    spot-trace replay, whose sampler nodes the trace adds later.
    """
    from spotlight.scheduling import resources

    config, path = autoscaler_config() if joined else (None, "")
    types = node_types(config, path) if config is not None else live_node_types()
    source = f"the node types of {path}" if config is not None else "its live nodes"
    markets = (resources.RESOURCE_SPOT, resources.RESOURCE_ON_DEMAND)
    if not any(t.resources.get(m, 0) > 0 for t in types for m in markets):
        raise ValueError(
            "this Ray cluster cannot run the job: no node offers the 'spot' or 'on_demand'"
            " resource (start it from cluster.yaml, or mark nodes with"
            " `ray start --resources '{\"on_demand\": 1, ...}'`)"
        )
    roles = _roles(opts, reward_gpus)
    if trace:  # the trace adds the sampler nodes; the replicas wait for them
        roles = [r for r in roles if resources.RESOURCE_SAMPLER not in r.per_unit]
    missing = shortfalls(types, roles)
    if missing:
        raise ValueError(f"this Ray cluster can never run the job ({source}): {'; '.join(missing)}")
    if config is not None:
        waiting = shortfalls(live_node_types(), roles)
        if waiting:
            progress.line(log, "[spotlight] waiting for the autoscaler: " + "; ".join(waiting))


def capacity_watch(
    opts: RayOptions, reward_gpus: float = 0.0, joined: bool = False, log: TextIO | None = None
) -> CapacityWatch:
    """The run's watch on its on-demand roles (:class:`~spotlight.job.run_watch.CapacityWatch`):
    autoscaled where the driver joined a cluster started by ``ray up``."""
    autoscaled = joined and autoscaler_config()[0] is not None
    return CapacityWatch(live_node_types, _roles(opts, reward_gpus), autoscaled, log)


def _roles(opts: RayOptions, reward_gpus: float):
    """What the job asks of the cluster (``capacity.job_roles``), from its options."""
    return job_roles(
        opts.num_train_workers, opts.num_samplers, opts.workers_per_replica, reward_gpus
    )


def check_storage(out_dir: Path, joined: bool) -> None:
    """Refuse a run folder the cluster's trainer nodes cannot reach (the CLI exits 2): on a
    cluster started by ``ray up`` (an autoscaler config on this node), ``out_dir`` must be on a
    shared file system (spotlight.scheduling.storage). A local Ray, or nodes started by hand,
    are not judged."""
    from spotlight.scheduling.storage import out_dir_problem, read_mounts

    config, _ = autoscaler_config() if joined else (None, "")
    mounts = Path("/proc/mounts")
    if config is None or not mounts.is_file():
        return
    problem = out_dir_problem(str(out_dir.resolve()), read_mounts(mounts.read_text()))
    if problem is not None:
        raise ValueError(problem)


def cleanup() -> None:
    """Delete the Serve app and the detached actors (skipped with ``keep_cluster_state``)."""
    from ray import serve

    from spotlight.actors import names
    from spotlight.actors.handles import kill_actors

    with contextlib.suppress(Exception):
        serve.delete(names.SERVE_APP)
    kill_actors()
