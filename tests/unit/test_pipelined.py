"""The pipelined schedule (``schedule="pipelined"``): its decisions, and the local runner that
samples iteration t + 1's rollout (with its candidates) on the weights before update t."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file

from spotlight.config import Config, ExplorationConfig
from spotlight.explore.exploration import Exploration
from spotlight.explore.strategy import ExplorationStrategy
from spotlight.training.pipeline import (
    old_policy_for,
    pipelined_plan,
    samples_lag,
)
from spotlight.training.run_local import run_local

from .conftest import stop_local_run_at
from .test_loop import FAST

PIPE = dataclasses.replace(FAST, schedule="pipelined")


def _explore(cfg: Config, **x) -> Config:
    return dataclasses.replace(cfg, exploration=ExplorationConfig(**{"max_candidates": 8, **x}))


def _rows(out):
    return [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()]


def _weights(out):
    return load_file(str(out / "checkpoint" / "policy.safetensors"))


def test_the_schedule_is_checked_before_a_run():
    with pytest.raises(ValueError, match="unknown schedule 'async'"):
        dataclasses.replace(FAST, schedule="async").validate()
    with pytest.raises(ValueError, match="leave rollout_staleness at 0"):
        dataclasses.replace(PIPE, rollout_staleness=1).validate()
    with pytest.raises(ValueError, match="critical_path"):
        _explore(PIPE, mode="critical_path").validate()
    _explore(PIPE, mode="spot").validate()


def test_a_pipelined_rollout_is_one_version_old_and_its_samples_are_checked():
    assert samples_lag([4, 4], 5, 1) == 1 and samples_lag([5], 5, 1) == 0
    with pytest.raises(ValueError, match="allows a lag of 0 to 1"):
        samples_lag([3], 5, 1)
    with pytest.raises(ValueError, match="allows a lag of 0 to 0"):
        samples_lag([4], 5, 0)
    with pytest.raises(ValueError, match="not one"):
        samples_lag([4, 5], 5, 1)
    with pytest.raises(ValueError, match="allows"):
        samples_lag([6], 5, 1)  # from the future
    nft = dataclasses.replace(FAST, grpo=dataclasses.replace(FAST.grpo, loss="nft"))
    current, copy = object(), object()
    assert old_policy_for(nft, 0, current, copy) is current
    assert old_policy_for(nft, 1, current, copy) is copy
    assert old_policy_for(FAST, 1, None, copy) is None  # Flow-GRPO: recorded log-probs
    with pytest.raises(ValueError, match="no copy"):
        old_policy_for(nft, 1, current, None)


def test_prompts_with_candidates_do_not_sample_their_own_seeds():
    prompts = ["a"] * 2 + ["b"] * 2 + ["c"] * 2
    exp = Exploration(3, 2, ["a", "b", "c"], {"a": 0, "b": 4, "c": 0})
    plan = pipelined_plan(prompts, [1, 2, 3, 4, 5, 6], 2, exp, None)
    assert plan.to_sample == [("a", 1), ("a", 2), ("c", 5), ("c", 6)]
    assert plan.reused == {"b"}
    back = Exploration.from_state(json.loads(json.dumps(exp.to_state())))
    assert back.work_items(0, 2) == exp.work_items(0, 2)


def test_candidates_get_what_the_update_time_leaves_after_the_rollout():
    x = dict(mode="spot", max_seeds_per_iteration=1000)
    sync = ExplorationStrategy(_explore(FAST, **x))
    pipe = ExplorationStrategy(_explore(PIPE, **x))
    for s in (sync, pipe):
        s.measured(1.0, 20.0)  # 20 samples/s
        s.trained(2.0)  # 2 s updates: 40 samples
    assert sync.budget() == 40
    assert pipe.budget() == 40 - 2 * 4  # the rollout's B x G go first
    assert sync.explores_next(0) and not pipe.explores_next(0)
    fixed = ExplorationStrategy(_explore(PIPE, mode="spot", budget_seeds=16))
    assert fixed.budget() == 16
    off = ExplorationStrategy(PIPE)
    assert off.plan_pipelined(1, 0, ["a", "b"], None).work_items(0, 4) == []


def test_a_pipeline_without_candidates_trains_what_one_step_stale_rollouts_train(tmp_path):
    """Flow-GRPO (its ratio against the recorded log-probs): the pipeline is exactly the
    one-step-stale rollouts of ``rollout_staleness=1``, bit for bit."""
    run_local(PIPE, tmp_path / "pipe")
    run_local(dataclasses.replace(FAST, rollout_staleness=1), tmp_path / "stale")
    pipe, stale = _rows(tmp_path / "pipe"), _rows(tmp_path / "stale")
    assert [r["rollout_lag"] for r in pipe] == [0, 1, 1, 1]
    assert [r["rollout_weights_version"] for r in pipe] == [0, 0, 1, 2]
    assert [r["rollout_weights_version"] for r in stale] == [0, 0, 1, 2]
    assert [r["train_reward_mean"] for r in pipe] == [r["train_reward_mean"] for r in stale]
    a, b = _weights(tmp_path / "pipe"), _weights(tmp_path / "stale")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_nft_takes_v_old_from_the_weights_that_sampled_the_batch(monkeypatch):
    from spotlight.flow.old_policy import OldPolicy
    from spotlight.policies import make_policy
    from spotlight.rewards import build_reward
    from spotlight.training import loop as loop_module

    cfg = dataclasses.replace(PIPE, grpo=dataclasses.replace(PIPE.grpo, loss="nft"))
    seen = []
    real = loop_module.grpo_update

    def spy(policy, *args, old_policy=None, **kw):
        seen.append(None if old_policy is None else [p.clone() for p in old_policy.params])
        return real(policy, *args, old_policy=old_policy, **kw)

    monkeypatch.setattr(loop_module, "grpo_update", spy)
    loop = loop_module.ReferenceLoop(cfg, make_policy(cfg.policy), build_reward(cfg.reward))
    before = []
    for it in range(3):
        before.append(OldPolicy(loop.policy).params)
        loop.run_iteration(it)
    assert seen[0] is None  # fresh samples: the weights the update starts with
    for it in (1, 2):  # sampled on the weights before the last update
        assert all(torch.equal(a, b) for a, b in zip(seen[it], before[it - 1], strict=True))
        assert not all(torch.equal(a, b) for a, b in zip(seen[it], before[it], strict=True))


@pytest.mark.parametrize("ema", [False, True], ids=["nft", "nft_old_ema"])
def test_a_pipeline_stopped_mid_run_resumes_bit_for_bit(tmp_path, monkeypatch, ema):
    """The checkpoint holds the next rollout's plan and the weights that sample it: a run
    stopped after iteration 2 and resumed trains what an uninterrupted one trains."""
    grpo = dataclasses.replace(
        PIPE.grpo, loss="nft", nft_old_ema=ema, nft_old_ema_hold_steps=0, nft_old_ema_rate=0.5
    )
    cfg = _explore(dataclasses.replace(PIPE, grpo=grpo), mode="spot", budget_seeds=16)
    run_local(cfg, tmp_path / "straight")
    state = stop_local_run_at(cfg, tmp_path / "split", 2, monkeypatch)
    assert state["iterations_done"] == 2
    assert state["pending_rollout"]["iteration"] == 2
    assert state["pending_rollout"]["weights_version"] == 1
    run_local(cfg, tmp_path / "split", resume=True)
    straight, split = _rows(tmp_path / "straight"), _rows(tmp_path / "split")
    assert [r["rollout_lag"] for r in split] == [0, 1, 1, 1]
    assert all(r["seeds_explored"] == 16 for r in straight)
    keys = ("train_reward_mean", "group_reward_std_mean", "explored_selected_group_std")
    for a, b in zip(straight, split, strict=True):
        assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
        # the trained groups are the selected candidates themselves
        assert a["group_reward_std_mean"] == pytest.approx(a["explored_selected_group_std"])
    wa, wb = _weights(tmp_path / "straight"), _weights(tmp_path / "split")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    final = json.loads((tmp_path / "split" / "checkpoint" / "state.json").read_text())
    assert "pending_rollout" not in final  # nothing left to sample
