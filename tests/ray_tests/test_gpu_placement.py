"""The one-machine GPU placement on Ray's own GPU resources (a local Ray told it has N GPUs, on a
machine without any): each role gets the GPUs the plan gives it, asked for through the job's
own request code (``trainer_scaling``, ``replica_actor_options``, ``reward_scorer``), and sees
only those. Probes stand in for the replicas and the reward (building a policy adds nothing
here); the trainer is a real ``TorchTrainer`` with a probe loop. The process group is gloo
here: NCCL needs real GPUs (the backend choice is unit-tested)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

from ray_tests.helpers import ray_options
from spotlight.job.cluster import JOB_ENV, init_local
from spotlight.job.options import local_resources
from spotlight.scheduling.gpu_placement import GpuAsk, GpuMachine, plan_gpus, worker_device


def _start_ray(num_gpus: int, opts) -> None:
    import ray

    from spotlight.actors.names import NAMESPACE

    init_local(
        ray,
        None,
        address="local",
        num_cpus=opts.num_samplers + opts.num_train_workers + 2,
        num_gpus=num_gpus,
        resources=local_resources(opts),
        namespace=NAMESPACE,
        include_dashboard=False,
        runtime_env={"env_vars": {**JOB_ENV, "RAY_AUTH_MODE": "disabled"}},
    )


def _seen() -> dict:
    import ray

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [int(g) for g in ray.get_gpu_ids()]
    return {"ids": ids, "visible": visible, "device": worker_device("cuda", ids, visible)}


def _probe_replicas_and_reward(opts, plan) -> tuple[list[dict], dict | None, list]:
    """What each sampler replica and the reward would see, placed by the job's options. The
    probes are actors, returned to be held: their GPUs stay taken while the trainer is placed."""
    import ray

    from spotlight.deployments.reward import reward_scorer
    from spotlight.deployments.sampler import replica_actor_options

    holder = ray.remote(_Holder)
    share = plan.ray_gpus()["sampler"]
    replica = replica_actor_options(None, opts.workers_per_replica, True, share)
    holders = [holder.options(**replica).remote() for _ in range(opts.num_samplers)]
    replicas = ray.get([h.seen.remote() for h in holders])
    reward = None
    gpus = plan.ray_gpus()["reward"]
    if gpus > 0:
        actor = reward_scorer("brightness", gpus=gpus)._bound_deployment.ray_actor_options
        holders.append(holder.options(**actor).remote())
        reward = ray.get(holders[-1].seen.remote())
    return replicas, reward, holders


class _Holder:
    def seen(self) -> dict:
        return _seen()


def _probe_trainer(opts, plan) -> list[dict]:
    """What each trainer worker sees, placed by the job's ``trainer_scaling``."""
    import ray.train
    from ray.train import RunConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from spotlight.job.launch import trainer_scaling

    scaling, torch_config = trainer_scaling(opts, plan)
    assert torch_config.backend == "nccl"  # what the job uses on CUDA; gloo to run here

    def loop(config: dict) -> None:
        import json

        import torch.distributed as dist

        seen = {**_seen(), "backend": dist.get_backend()}
        rank = ray.train.get_context().get_world_rank()
        (Path(config["dir"]) / f"rank{rank}.json").write_text(json.dumps(seen))

    with tempfile.TemporaryDirectory() as d:
        result = TorchTrainer(
            loop,
            train_loop_config={"dir": d},
            scaling_config=scaling,
            torch_config=TorchConfig(backend="gloo"),
            run_config=RunConfig(name=f"gpu-probe-{os.getpid()}", storage_path=d),
        ).fit()
        assert result.error is None
        return json.loads((Path(d) / "rank0.json").read_text())


def _run_probes(num_gpus: int, opts):
    import ray
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers lack ray_tests

    reward_gpus = opts.reward_gpus or 0.0  # None: the brightness reward, on the CPU
    plan = plan_gpus(GpuMachine(num_gpus), GpuAsk(*_counts(opts), reward_gpus=reward_gpus))
    _start_ray(num_gpus, opts)
    try:
        replicas, reward, holders = _probe_replicas_and_reward(opts, plan)
        trainer = _probe_trainer(opts, plan)
        del holders
        return plan, replicas, reward, trainer
    finally:
        ray.shutdown()


def _counts(opts) -> tuple[int, int, int]:
    return opts.num_train_workers, opts.num_samplers, opts.workers_per_replica


def test_four_gpus_each_role_on_its_own_gpus():
    opts = ray_options(device="cuda", num_samplers=2, num_train_workers=1, reward_gpus=1.0)
    plan, replicas, reward, trainer = _run_probes(4, opts)
    assert [len(r["ids"]) for r in replicas] == [1, 1]
    sampler_ids = {g for r in replicas for g in r["ids"]}
    assert len(sampler_ids) == 2  # one GPU each, not shared
    for r in replicas:  # each replica sees its own GPU only, as cuda:0
        assert r["visible"] == ",".join(map(str, r["ids"])) and r["device"] == "cuda:0"
    assert reward is not None and len(reward["ids"]) == 1
    assert reward["visible"] == str(reward["ids"][0])
    assert len(trainer["ids"]) == 1 and trainer["device"] == "cuda:0"
    used = [*sampler_ids, reward["ids"][0], trainer["ids"][0]]
    assert sorted(used) == [0, 1, 2, 3]  # every GPU, no two roles on one
    assert trainer["backend"] == "gloo"
    assert plan.ray_gpus() == {"trainer": 1.0, "sampler": 1.0, "reward": 1.0}


def test_one_gpu_shared_by_a_replica_and_a_trainer_worker():
    opts = ray_options(device="cuda", num_samplers=1, num_train_workers=1)
    plan, replicas, reward, trainer = _run_probes(1, opts)
    assert plan.shared and reward is None
    assert replicas[0]["ids"] == [0] and replicas[0]["visible"] == "0"
    assert trainer["ids"] == [0] and trainer["visible"] == "0" and trainer["device"] == "cuda:0"
    over = ray_options(device="cuda", num_samplers=2, num_train_workers=1)
    with pytest.raises(ValueError, match="--samplers 1 --train-workers 1"):
        plan_gpus(GpuMachine(1), GpuAsk(*_counts(over)))
