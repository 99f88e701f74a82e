"""Seed exploration on the Ray job: the replicas explore, and the local runner, given the same
config, explores the same candidates, selects the same seeds and trains the same weights."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from ray_tests.helpers import group_noise, metrics_rows, ray_options, smoke

pytestmark = pytest.mark.slow


WAIT_FOR_TRAINER_S = 8.0
"""Enough for a trainer whose loop ends after its last post to be gone (1.3 s measured)."""


def test_the_local_runner_explores_and_selects_the_seeds_the_ray_job_does(local_ray, tmp_path):
    """With a fixed budget, spot exploration is the same decisions on both runners: the same
    candidates on the same weights, the same selected seeds, so the same training. On Ray the
    exploration of iteration t + 1 runs on the replicas while the trainer trains (one version
    stale) and picks groups at least as varied as the random ones."""
    from spotlight.config import ExplorationConfig
    from spotlight.job.run import run_ray
    from spotlight.training.run_local import run_local

    explore = ExplorationConfig(mode="spot", budget_seeds=16, max_candidates=8)
    cfg = smoke(iterations=3, exploration=explore)
    run_ray(cfg, tmp_path / "ray", opts=ray_options(sampler_idle_priority=False))
    torch.set_num_threads(1)
    run_local(cfg, tmp_path / "local")
    ray_rows, local_rows = metrics_rows(tmp_path / "ray"), metrics_rows(tmp_path / "local")
    assert [r.get("seeds_explored") for r in ray_rows] == [None, 16, 16]
    assert "explore_prompts" not in ray_rows[0]  # nothing was explored before the first update
    for r in ray_rows[1:]:
        assert r["explore_budget_predicted"] > 0 and r["seeds_explored"] > 0
        assert r["explore_weights_version"] == r["weights_version"] - 2  # one version stale
        # The max-variance subset is at least as varied as the random first G seeds.
        assert r["explored_selected_group_std"] >= r["explored_random_group_std"] - 1e-12
        assert "rank_spearman_stale_fresh" in r
    for got, want in zip(ray_rows, local_rows, strict=True):
        for key in ("explore_prompts", "explore_fallback_prompts", "seeds_explored"):
            assert got.get(key) == want.get(key), key
        for key in (
            "explored_selected_group_std",
            "explored_random_group_std",
            "train_reward_mean",
            "group_reward_std_mean",
        ):
            assert got.get(key) == pytest.approx(want.get(key), abs=1e-6), key
    ray_w = load_file(str(tmp_path / "ray" / "checkpoint" / "policy.safetensors"))
    local_w = load_file(str(tmp_path / "local" / "checkpoint" / "policy.safetensors"))
    for k, v in local_w.items():
        torch.testing.assert_close(ray_w[k], v, atol=1e-6, rtol=1e-5)
    planners = [
        json.loads((tmp_path / d / "bandit_state.json").read_text()) for d in ("ray", "local")
    ]
    got, want = (p["planner"]["arms"] for p in planners)
    assert got.keys() == want.keys() and got
    for k in want:
        assert got[k] == pytest.approx(want[k], abs=1e-6)


def _take_the_last_update_late(monkeypatch, last: int, wait_s: float):
    """The controller takes the update of iteration ``last`` only once the trainer's run has
    ended, or after ``wait_s``. The trainer's workers own the objects of the update (its
    optimizer state), so workers that exit after their last post would fail the run here.
    Returns the controllers started and the seconds waited."""
    import time

    from spotlight.job import controller, protocol

    runs, waited = [], []
    start, await_update = controller.Controller.start, protocol.await_update

    def recording_start(self, resume):
        runs.append(self)
        return start(self, resume)

    def late(client, iteration):
        update = await_update(client, iteration)
        if iteration == last:
            t0 = time.monotonic()
            runs[-1].watch.trainer.thread.join(timeout=wait_s)
            waited.append(time.monotonic() - t0)
        return update

    monkeypatch.setattr(controller.Controller, "start", recording_start)
    monkeypatch.setattr(protocol, "await_update", late)
    return runs, waited


def test_the_critical_path_on_ray_trains_what_the_local_runner_trains(
    local_ray, tmp_path, monkeypatch
):
    """Critical-path exploration on the replicas, its selected samples sent to the trainer as
    they are (not sampled again), groups sharing their initial noise: the local runner's
    selection and update. The controller takes the last update late (after the trainer's
    loop could have ended): the trainer's workers stay until the controller has it, and a
    resume of the finished run ends at once, its trainer with it."""
    from spotlight.config import ExplorationConfig
    from spotlight.job.run import run_ray
    from spotlight.training.run_local import run_local

    explore = ExplorationConfig(mode="critical_path", max_candidates=8, uniform=True)
    cfg = group_noise(smoke(iterations=1, exploration=explore))
    runs, waited = _take_the_last_update_late(monkeypatch, last=0, wait_s=WAIT_FOR_TRAINER_S)
    run_ray(cfg, tmp_path / "ray", opts=ray_options())
    assert waited and waited[0] >= WAIT_FOR_TRAINER_S  # the trainer stayed
    finished = (tmp_path / "ray" / "checkpoint" / "policy.safetensors").read_bytes()
    run_ray(cfg, tmp_path / "ray", resume=True, opts=ray_options())
    assert len(runs) == 2 and not runs[-1].watch.trainer.alive()  # it waited for nothing
    assert (tmp_path / "ray" / "checkpoint" / "policy.safetensors").read_bytes() == finished
    torch.set_num_threads(1)
    run_local(cfg, tmp_path / "local")
    (got,) = metrics_rows(tmp_path / "ray")
    (want,) = metrics_rows(tmp_path / "local")
    assert got["explore_prompts"] == want["explore_prompts"] == 2
    assert got["seeds_explored"] == want["seeds_explored"] == 16
    for key in ("explored_selected_group_std", "train_reward_mean", "group_reward_std_mean"):
        assert got[key] == pytest.approx(want[key], abs=1e-6), key
    # Trained groups are the selected ones (same weights): their std is the selected std.
    assert got["group_reward_std_mean"] == pytest.approx(got["explored_selected_group_std"])
    ray_w = load_file(str(tmp_path / "ray" / "checkpoint" / "policy.safetensors"))
    local_w = load_file(str(tmp_path / "local" / "checkpoint" / "policy.safetensors"))
    for k, v in local_w.items():
        torch.testing.assert_close(ray_w[k], v, atol=1e-6, rtol=1e-5)
