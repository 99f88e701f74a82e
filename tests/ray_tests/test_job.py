"""The main job end to end on a real local Ray: Serve replicas, Ray Train, detached actors
(seed exploration on it: test_job_exploration.py)."""

from __future__ import annotations

import io
import json

import pytest
import torch
from safetensors.torch import load_file

from ray_tests.helpers import group_noise, metrics_rows, ray_options, smoke
from spotlight.policies import make_policy
from spotlight.rewards import build_reward
from spotlight.scheduling.costs import PriceTable
from spotlight.training.loop import ReferenceLoop

pytestmark = pytest.mark.slow


def test_a_job_the_cluster_can_never_hold_is_refused_before_work(local_ray, tmp_path, monkeypatch):
    """Live nodes only: refused. With an autoscaler whose node types can hold it: waited for,
    and said so. With node types that never can: refused, naming the shortfall and the flag."""
    import io

    import yaml

    from spotlight.job.cluster import check_capacity
    from spotlight.scheduling import resources

    with pytest.raises(ValueError, match=r"5 trainer workers \(--train-workers\)"):
        check_capacity(ray_options(num_train_workers=5))
    config = {
        "head_node_type": "head",
        "available_node_types": {
            "head": {"resources": {resources.RESOURCE_ON_DEMAND: 1}, "max_workers": 0},
            "trainer": {"resources": {resources.RESOURCE_TRAINER: 8}, "max_workers": 1},
            "spot": {"resources": {resources.RESOURCE_SAMPLER: 8}, "max_workers": 2},
        },
    }
    path = tmp_path / "bootstrap.yaml"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("SPOTLIGHT_CLUSTER_CONFIG", str(path))
    log = io.StringIO()
    check_capacity(ray_options(num_train_workers=5), joined=True, log=log)
    assert "waiting for the autoscaler: 5 trainer workers" in log.getvalue()
    with pytest.raises(ValueError, match=rf"never run the job \(the node types of {path}\): 9"):
        check_capacity(ray_options(num_train_workers=9), joined=True)


def test_a_cluster_without_spot_or_on_demand_marks_is_refused(tmp_path):
    """A Ray cluster not started from cluster.yaml (no market resources) fails before work."""
    import subprocess
    import sys

    code = (
        "import ray\n"
        "from spotlight.job.cluster import check_capacity\n"
        "from spotlight.job.options import RayOptions\n"
        "ray.init(address='local', num_cpus=1, include_dashboard=False)\n"
        "try:\n"
        "    check_capacity(RayOptions(), joined=True)\n"
        "except ValueError as e:\n"
        "    print('REFUSED', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "REFUSED" in out.stdout and "'spot' or 'on_demand'" in out.stdout, out.stderr[-2000:]


def test_a_qwen_image_recipe_runs_through_serve_train_and_actors_as_the_reference_loop(
    local_ray, tmp_path_factory, tmp_path
):
    """qwen-image-geneval-512 as shipped but for its sizes (and 2 iterations), on tiny random
    Qwen-Image, Mask2Former and CLIP folders: the Serve replicas load the policy, the reward
    deployment loads the reward's models from ``reward_model``, and with the same seeds and
    starting weights the samples, rewards and updates are the reference loop's (one torch
    thread on both sides). Its accounting adds up, and it cleans up after itself."""
    import dataclasses

    from tiny_hf.recipes import save_tiny_models, tiny_recipe

    from spotlight.job.run import run_ray

    cfg = tiny_recipe("qwen-image-geneval-512", save_tiny_models(tmp_path_factory.mktemp("m")))
    cfg = dataclasses.replace(cfg, num_iterations=2)
    prices = PriceTable(on_demand_usd_per_gpu_h=3.6, spot_discount=0.75)
    summary = run_ray(cfg, tmp_path, opts=ray_options(prices=prices))

    rows = metrics_rows(tmp_path)
    assert [r["iteration"] for r in rows] == [0, 1]
    assert [r["weights_version"] for r in rows] == [1, 2]
    assert "val_reward" in rows[-1]
    state = json.loads((tmp_path / "checkpoint" / "state.json").read_text())
    assert state["iterations_done"] == 2 and state["weights_version"] == 2

    torch.set_num_threads(1)
    ref = ReferenceLoop(cfg, make_policy(cfg.policy), build_reward(cfg.reward, cfg.reward_model))
    for got, want in zip(rows, [ref.run_iteration(i) for i in range(2)], strict=True):
        assert got["num_samples"] == want["num_samples"] == 8
        assert got["train_reward_mean"] == pytest.approx(want["train_reward_mean"], abs=1e-6)
        assert got["group_reward_std_mean"] == pytest.approx(
            want["group_reward_std_mean"], abs=1e-6
        )
    trained = load_file(str(tmp_path / "checkpoint" / "policy.safetensors"))
    for k, v in ref.policy.state_dict().items():
        torch.testing.assert_close(trained[k], v, atol=1e-6, rtol=1e-5)

    # Accounting: every item's busy time is inside the held time; cost = held x price.
    last = rows[-1]
    assert 0 < last["busy_gpu_s_spot"] <= last["gpu_s_spot"]
    assert 0 < last["busy_gpu_s_on_demand"] <= last["gpu_s_on_demand"]
    spot_h, od_h = last["gpu_s_spot"] / 3600, last["gpu_s_on_demand"] / 3600
    assert last["cost_usd"] == pytest.approx(spot_h * 0.9 + od_h * 3.6)
    assert last["items_lost"] == 0 and last["duplicates_ignored"] == 0
    assert last["replicas"] == {"spot": 2}
    assert summary["final_val_reward"] == rows[-1]["val_reward"]
    assert (tmp_path / "report.png").stat().st_size > 0

    # The run cleaned up: the detached actors are gone.
    from spotlight.actors.names import NAMESPACE, REQUEST_QUEUE

    with pytest.raises(ValueError):
        local_ray.get_actor(REQUEST_QUEUE, namespace=NAMESPACE)


def _nft_ema(cfg):
    """``grpo.nft_old_ema`` with a decay that mixes from the first optimizer step (0.5, then
    0.9: tiny-smoke takes one step per iteration)."""
    import dataclasses

    grpo = dataclasses.replace(
        cfg.grpo,
        loss="nft",
        nft_old_ema=True,
        nft_old_ema_hold_steps=0,
        nft_old_ema_rate=0.5,
        nft_old_ema_max=0.9,
    )
    return dataclasses.replace(cfg, grpo=grpo)


def test_nft_with_an_ema_on_two_sampling_trainer_workers_resumes_as_the_reference_loop(
    local_ray, tmp_path
):
    """DiffusionNFT's EMA old policy on two data-parallel trainer workers: the replica samples
    and validates with the published (old) weights, both workers keep the same old copy, their
    all-reduced halves make the full batch's update, the controller checkpoints trained
    weights and old policy, and a resumed driver restores both. With ``trainer_samples`` the
    workers also take rollout items while they wait for the rollout, sampling with the old
    policy swapped in (the bits of the published weights the replica uses), and groups share
    their initial noise (``sampler.group_init_noise``: the items carry each group's init seed
    to whoever samples them). Rewards, trained weights and old policy are the reference
    loop's (each loss's data-parallel update: tests/unit/test_update_data_parallel.py;
    trainer sampling with the weights of the version before: the pipelined killed-driver
    test, test_driver_restart_and_submit.py)."""
    import dataclasses

    from spotlight.flow.old_policy import OldPolicy
    from spotlight.job.run import run_ray

    cfg = group_noise(_nft_ema(smoke(iterations=2)))
    cfg = dataclasses.replace(cfg, sampler=dataclasses.replace(cfg.sampler, batch_size=1))
    opts = ray_options(num_train_workers=2, num_samplers=1, trainer_samples=True)
    run_ray(dataclasses.replace(cfg, num_iterations=1), tmp_path, opts=opts)
    # the resume holds its leases longer: it says so, and the run folder records it
    longer = dataclasses.replace(opts, lease_s=opts.lease_s + 30)
    log = io.StringIO()
    run_ray(cfg, tmp_path, resume=True, opts=longer, log=log)
    assert f"lease_s: {opts.lease_s!r} -> {longer.lease_s!r}" in log.getvalue()
    saved = json.loads((tmp_path / "ray_options.json").read_text())
    assert saved["lease_s"] == longer.lease_s
    rows = metrics_rows(tmp_path)
    assert [r["iteration"] for r in rows] == [0, 1]
    assert [r["loss/nft_old_decay"] for r in rows] == [0.5, 0.9]
    assert any(r["replicas"].get("trainer", 0) >= 1 for r in rows)  # they pulled as trainer
    assert all(r["items_lost"] == 0 and r["duplicates_ignored"] == 0 for r in rows)
    torch.set_num_threads(1)
    ref = ReferenceLoop(cfg, make_policy(cfg.policy), build_reward(cfg.reward))
    for got, want in zip(rows, [ref.run_iteration(i) for i in range(2)], strict=True):
        assert got["train_reward_mean"] == pytest.approx(want["train_reward_mean"], abs=1e-4)
        assert got["group_reward_std_mean"] == pytest.approx(
            want["group_reward_std_mean"], abs=1e-4
        )
    assert rows[-1]["val_reward"] == pytest.approx(ref.evaluate(), abs=1e-4)
    trained = load_file(str(tmp_path / "checkpoint" / "policy.safetensors"))
    for k, v in ref.policy.state_dict().items():  # all-reduced halves = the full batch
        torch.testing.assert_close(trained[k], v, atol=1e-5, rtol=1e-4)
    old = OldPolicy(make_policy(cfg.policy))
    old.load_bytes((tmp_path / "checkpoint" / "nft_old_policy.safetensors").read_bytes())
    assert old.optimizer_steps == 2
    for got, want in zip(old.params, ref.old_policy.params, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    assert not old.matches(ref.policy)  # the EMA mixed: the sampling policy is not the trained
