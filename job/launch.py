"""Launching the job's two halves: the Serve sampler app and the Ray Train trainer."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from spotlight import progress
from spotlight.config import Config
from spotlight.job.options import RayOptions
from spotlight.scheduling.gpu_placement import GpuPlan, process_group_backend

TRAIN_DIR = "ray_train"
"""Ray Train's storage inside the run folder."""


def raise_storage_error(error: BaseException) -> None:
    """Raise a node's missing-storage message (spotlight.scheduling.storage) found in the
    error of a deployment or a trainer as one ``FileNotFoundError`` (the CLI exits 2)."""
    from spotlight.scheduling.storage import storage_error_in

    message = storage_error_in(str(error))
    if message is not None:
        raise FileNotFoundError(message) from None


def autoscaling(max_replicas: int) -> dict[str, Any]:
    """Serve autoscaling driven by the request queue's depth (spotlight.deployments.scaling)."""
    return {
        "min_replicas": 1,
        "initial_replicas": max_replicas,
        "max_replicas": max_replicas,
        "upscale_delay_s": 1.0,
        "downscale_delay_s": 60.0,
        "policy": {"policy_function": "spotlight.deployments.scaling:queue_depth_policy"},
    }


def start_serve(
    cfg: Config, opts: RayOptions, trace: bool, log: TextIO | None, gpus: GpuPlan | None = None
) -> None:
    """Deploy the sampler replicas and their reward deployment. ``trace``: a local spot-trace
    replay, whose replicas wait for the trace's spot nodes (plus an on-demand fallback).
    ``gpus``: the one-machine GPU placement (job/placement.py), else whole GPUs."""
    from ray import serve

    from spotlight.actors import names
    from spotlight.deployments.reward import reward_scorer
    from spotlight.deployments.sampler import ReplicaSpec, SamplerReplica, replica_actor_options
    from spotlight.scheduling import resources

    spec = ReplicaSpec(
        policy=dataclasses.asdict(cfg.policy),
        sampler=dataclasses.asdict(cfg.sampler),
        threads=opts.threads_per_worker,
        device=opts.device,
        commit_every=opts.commit_every,
        notice_sources=tuple(opts.notice_sources),
        sp_degree=opts.sp_degree,
        sp_workers=opts.workers_per_replica,
        idle_priority=opts.sampler_idle_priority and not opts.device.startswith("cuda"),
        merge_lora=opts.merge_lora,
    )
    gpu = opts.device.startswith("cuda")
    per_gpu = gpus.ray_gpus() if gpus is not None else None

    def sampler_opts(pool: str | None) -> dict[str, Any]:  # pool: the local trace replay
        share = per_gpu["sampler"] if per_gpu else 1.0
        return replica_actor_options(pool, opts.workers_per_replica, gpu, share)

    def reward():
        return reward_scorer(
            cfg.reward,
            opts.threads_per_worker,
            spec.idle_priority,
            cfg.reward_model,
            per_gpu["reward"] if per_gpu else opts.scorer_gpus(cfg.reward),
        )

    apps = {
        names.SERVE_APP: SamplerReplica.options(
            ray_actor_options=sampler_opts(resources.RESOURCE_SPOT if trace else None),
            autoscaling_config=autoscaling(opts.num_samplers),
            health_check_period_s=2,
        ).bind(spec, reward())
    }
    if trace and opts.spill != "never":  # the head's on-demand fallback replica
        apps[names.SERVE_APP + "-on-demand"] = SamplerReplica.options(
            name="OnDemandSampler",
            ray_actor_options=sampler_opts(resources.RESOURCE_ON_DEMAND),
            num_replicas=1,
            health_check_period_s=2,
        ).bind(spec, reward())
    quiet = {"log_level": "WARNING", "enable_access_log": False}
    serve.start(proxy_location="Disabled", logging_config=quiet)
    t0 = time.perf_counter()
    for name, app in apps.items():
        if trace:  # replicas wait for the trace's spot nodes; the wait loop ticks the trace
            serve._run(app, _blocking=False, name=name, route_prefix=None, logging_config=quiet)
        else:
            try:
                serve.run(app, name=name, route_prefix=None, logging_config=quiet)
            except RuntimeError as e:  # a replica that cannot start: say why in one line
                raise_storage_error(e)
                raise
    progress.line(
        log,
        f"[spotlight] serve app {'deployed' if trace else 'up'} in"
        f" {time.perf_counter() - t0:.1f} s",
    )


def trainer_scaling(opts: RayOptions, gpus: GpuPlan | None = None):
    """The trainer workers' ``ScalingConfig`` (a CPU, a ``trainer_gpu``, and on CUDA the
    plan's GPU share, else a whole GPU) and ``TorchConfig`` (NCCL on CUDA, gloo on the CPU)."""
    from ray.train import ScalingConfig
    from ray.train.torch import TorchConfig

    from spotlight.scheduling import resources

    gpu = opts.device.startswith("cuda")
    per_worker: dict[str, float] = {"CPU": 1, resources.RESOURCE_TRAINER: 1}
    if gpu:
        per_worker["GPU"] = gpus.ray_gpus()["trainer"] if gpus is not None else 1.0
    scaling = ScalingConfig(
        num_workers=opts.num_train_workers, use_gpu=gpu, resources_per_worker=per_worker
    )
    return scaling, TorchConfig(backend=process_group_backend(opts.device))


@dataclasses.dataclass
class TrainerRun:
    """The Ray Train run, fitted on a thread of the driver: alive while it trains."""

    thread: threading.Thread | None = None
    error: BaseException | None = None

    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def check(self) -> None:
        """Raise when the trainer has failed (the driver's waits call this every slice)."""
        if self.error is not None:
            raise_storage_error(self.error)
            raise RuntimeError(f"the trainer failed: {self.error}") from self.error

    def join(self, timeout_s: float = 120.0) -> None:
        if self.thread is not None:
            self.thread.join(timeout=timeout_s)
        self.check()


def start_trainer(
    cfg: Config,
    opts: RayOptions,
    out_dir: Path,
    run_id: str,
    start: int,
    version: int,
    initial: dict[str, bytes] | None,
    gpus: GpuPlan | None = None,
) -> TrainerRun:
    """Fit a ``TorchTrainer`` of :func:`spotlight.job.trainer.train_loop` on a thread, from
    iteration ``start`` and weights ``version`` (``initial``: the run's checkpoint parts by
    name: ``policy`` (the trained weights), ``optimizer``, ``old_policy`` with
    ``grpo.nft_old_ema``, ``rollout_weights`` for a pipelined run with an iteration left).
    ``gpus``: the one-machine GPU placement, else one whole GPU a worker on CUDA."""
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig
    from ray.train.torch import TorchTrainer

    from spotlight.job.trainer import train_loop

    scaling, torch_config = trainer_scaling(opts, gpus)
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={
            "cfg": cfg.to_dict(),
            "start": start,
            "start_version": version,
            "initial": [ray.put(initial)] if initial is not None else None,
            "threads": opts.trainer_threads,
            "device": opts.device,
            "batch_timeout_s": opts.item_timeout_s,
            "trainer_samples": opts.trainer_samples,
            "sampler_threads": opts.threads_per_worker,
            "commit_every": opts.commit_every,
        },
        scaling_config=scaling,
        torch_config=torch_config,
        run_config=RunConfig(
            name=f"trainer-{run_id}-{start}-{time.time_ns()}",
            storage_path=str((out_dir / TRAIN_DIR).resolve()),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            failure_config=FailureConfig(max_failures=2),
        ),
    )
    run = TrainerRun()

    def fit() -> None:
        try:
            trainer.fit()
        except BaseException as e:  # re-raised by the driver's waits (TrainerRun.check)
            run.error = e

    run.thread = threading.Thread(target=fit, name="trainer-fit", daemon=True)
    run.thread.start()
    return run
