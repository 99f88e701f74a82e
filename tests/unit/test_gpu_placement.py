"""The one-machine GPU placement: which role gets which GPUs, what is refused, the backend."""

from __future__ import annotations

import pytest

from spotlight.config import Config, PolicyConfig
from spotlight.job.options import RayOptions
from spotlight.job.placement import local_gpu_plan
from spotlight.recipes import get_recipe
from spotlight.scheduling.gpu_placement import (
    ROLE_MEMORY_GB,
    SHARED_GPU,
    GpuAsk,
    GpuMachine,
    default_counts,
    plan_gpus,
    process_group_backend,
    role_memory,
    worker_device,
)

QWEN_512 = ROLE_MEMORY_GB[("qwen-image", 512)]
H100_GB, H200_GB = 85.0, 150.1  # torch's total_memory / 1e9 of each card


def test_one_gpu_is_shared_by_one_replica_and_one_trainer_worker():
    plan = plan_gpus(GpuMachine(1), GpuAsk(1, 1))
    assert plan.shared and plan.trainer == ((0,),) and plan.samplers == ((0,),)
    assert plan.ray_gpus() == {"trainer": SHARED_GPU, "sampler": SHARED_GPU, "reward": 0.0}
    assert plan.ray_gpus()["trainer"] + plan.ray_gpus()["sampler"] <= 1.0
    assert plan.reward == () and "reward on CPU" in plan.layout()


@pytest.mark.parametrize(
    ("gpus", "reward", "trainer", "samplers", "reward_ids"),
    [
        (2, False, ((0,),), ((1,),), ()),
        (2, True, ((0,),), ((1,),), ()),  # no GPU left: a default model reward on the CPU
        (4, True, ((0,),), ((1,), (2,)), (3,)),
        (4, False, ((0,),), ((1,), (2,), (3,)), ()),
        (8, True, ((0,), (1,)), tuple((g,) for g in range(2, 7)), (7,)),
    ],
)
def test_whole_gpus_trainer_first_then_replicas_then_reward(
    gpus, reward, trainer, samplers, reward_ids
):
    workers, replicas = default_counts(gpus, reward)
    ask = GpuAsk(workers, replicas, reward_gpus=1.0 if reward else 0.0)
    plan = plan_gpus(GpuMachine(gpus, H100_GB), ask)
    assert (plan.trainer, plan.samplers, plan.reward) == (trainer, samplers, reward_ids)
    assert not plan.shared and plan.ray_gpus()["trainer"] == 1.0
    assert plan.idle_gpus() == []


def test_sp_replicas_take_consecutive_gpus_and_the_rest_idles():
    plan = plan_gpus(GpuMachine(8), GpuAsk(1, 1, workers_per_replica=4))
    assert plan.samplers == ((1, 2, 3, 4),) and plan.idle_gpus() == [5, 6, 7]
    assert "idle GPUs 5,6,7" in plan.layout()


@pytest.mark.parametrize(
    ("machine", "ask", "says"),
    [
        (GpuMachine(1), GpuAsk(1, 2), "--samplers 1 --train-workers 1"),
        (GpuMachine(2), GpuAsk(1, 2), "need 3 whole GPUs and this machine has 2 GPUs"),
        (GpuMachine(4), GpuAsk(1, 1, 4), "need 5 whole GPUs"),
        (GpuMachine(0), GpuAsk(1, 1), "this machine has 0 GPUs"),
        (
            GpuMachine(2),
            GpuAsk(1, 1, reward_gpus=1.0, reward_gpus_asked=True),
            "--reward-gpus 1: no GPU is left",
        ),
        (GpuMachine(1, H100_GB), GpuAsk(1, 1, memory_gb=QWEN_512), "needs 136.1 GB"),
        (GpuMachine(2, 40.0), GpuAsk(1, 1, memory_gb=QWEN_512), "sampler replica (--samplers)"),
    ],
)
def test_what_cannot_fit_is_refused_in_one_line(machine, ask, says):
    with pytest.raises(ValueError, match=r"^[^\n]*$") as err:
        plan_gpus(machine, ask)
    assert says in str(err.value)


def test_memory_split_of_the_512_recipe_fits_one_h200_not_one_h100():
    ask = GpuAsk(1, 1, memory_gb=role_memory("qwen-image", {"height": 512, "width": 512}))
    assert plan_gpus(GpuMachine(1, H200_GB), ask).shared
    with pytest.raises(ValueError, match="shared by a sampler replica"):
        plan_gpus(GpuMachine(1, H100_GB), ask)
    assert plan_gpus(GpuMachine(2, H100_GB), ask).trainer == ((0,),)  # each its own GPU
    assert role_memory("tiny", {}) is None


def test_backend_is_nccl_on_cuda_and_gloo_on_cpu():
    assert process_group_backend("cuda") == "nccl"
    assert process_group_backend("cuda:1") == "nccl"
    assert process_group_backend("cpu") == "gloo"


def test_worker_device_is_the_assigned_gpu_among_the_visible_ones():
    assert worker_device("cuda", [3], "2,3") == "cuda:1"
    assert worker_device("cuda", ["0"], "0") == "cuda:0"
    assert worker_device("cpu", [], None) == "cpu"
    with pytest.raises(ValueError, match="assigned no GPU"):
        worker_device("cuda", [], "0")
    with pytest.raises(ValueError, match="not in CUDA_VISIBLE_DEVICES"):
        worker_device("cuda", [5], "0,1")


def test_local_plan_only_for_cuda_without_a_cluster(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = Config(policy=PolicyConfig(name="tiny"))
    assert local_gpu_plan(cfg, RayOptions(device="cpu"), GpuMachine(0)) is None
    joined = RayOptions(device="cuda", address="ray://head:10001", num_samplers=1)
    assert local_gpu_plan(cfg, joined, GpuMachine(0)) is None
    one = RayOptions(device="cuda", num_samplers=1)
    assert local_gpu_plan(cfg, one, GpuMachine(1)).shared
    with pytest.raises(ValueError, match="this machine has 0 GPUs"):
        local_gpu_plan(cfg, one, GpuMachine(0))
    qwen = get_recipe("qwen-image-ocr-512")  # its OCR model prefers a GPU: the CPU on 1 GPU
    with pytest.raises(ValueError, match=r"needs 136\.1 GB"):
        local_gpu_plan(qwen, one, GpuMachine(1, H100_GB))
    assert local_gpu_plan(qwen, one, GpuMachine(1, H200_GB)).reward == ()


def test_cli_refuses_cuda_without_gpus_and_merged_flow_grpo_before_ray(
    tmp_path, capsys, monkeypatch
):
    import ray

    from spotlight.cli import main
    from spotlight.job import placement

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(placement, "cuda_machine", lambda: GpuMachine(0))
    base = ["train", "--iterations", "1", "--no-wandb", "--out", str(tmp_path / "run")]
    assert main([*base, "--recipe", "tiny-smoke", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    # the device check refuses first (spotlight.scheduling.machine), before the GPU plan
    assert "--device cuda: this machine has no CUDA GPU" in err
    assert len(err.strip().splitlines()) == 1
    assert main([*base, "--recipe", "tiny-smoke", "--merge-lora"]) == 2  # Flow-GRPO
    assert "--merge-lora: grpo.loss 'flow_grpo' needs" in capsys.readouterr().err
    assert not ray.is_initialized() and not (tmp_path / "run").exists()
