"""The single-process loop: it moves the reward, resumes exactly, and refuses bad runs."""

import dataclasses
import json
import shutil

import pytest
import torch

from spotlight.cli import main
from spotlight.config import Config, GRPOConfig, PolicyConfig, SamplerConfig
from spotlight.recipes import RECIPES, get_recipe
from spotlight.training.loop import iteration_batch, prompt_sets, score_groups
from spotlight.training.run_local import run_local

from .conftest import SMALL, stop_local_run_at

FAST = Config(
    recipe="tiny-smoke",
    policy=PolicyConfig(name="tiny", init_seed=0, options=dataclasses.asdict(SMALL)),
    sampler=SamplerConfig(num_steps=4, eta=0.7, batch_size=8),
    grpo=GRPOConfig(group_size=4, learning_rate=2e-3, train_batch_size=8),
    reward="brightness",
    num_iterations=4,
    num_prompts_per_iteration=2,
    num_val_prompts=4,
    val_every=2,
)


def test_every_recipe_is_valid():
    for name in RECIPES:
        assert get_recipe(name).recipe == name


def test_prompts_and_seeds_are_a_function_of_seed_and_iteration():
    train, val = prompt_sets(FAST)
    assert not set(train) & set(val) and len(val) == 4
    assert iteration_batch(FAST, train, 3) == iteration_batch(FAST, train, 3)
    assert iteration_batch(FAST, train, 3) != iteration_batch(FAST, train, 4)
    prompts, seeds = iteration_batch(FAST, train, 0)
    assert len(prompts) == len(seeds) == 8 and len(set(prompts)) == 2


def test_the_loop_raises_the_reward(tmp_path):
    cfg = dataclasses.replace(FAST, num_iterations=12, val_every=12)
    summary = run_local(cfg, tmp_path / "run")
    rows = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == list(range(12))
    assert [r["weights_version"] for r in rows] == list(range(1, 13))
    first = sum(r["train_reward_mean"] for r in rows[:3]) / 3
    last = sum(r["train_reward_mean"] for r in rows[-3:]) / 3
    assert last > first + 0.02, (first, last)
    assert summary["num_iterations"] == 12 and summary["final_val_reward"] is not None
    assert summary["initial_val_reward"] is not None
    from spotlight.policies.tiny import TinyPolicy

    assert TinyPolicy.load(tmp_path / "run/checkpoint/policy.safetensors").config == SMALL
    png = tmp_path / "run/reward.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_resume_continues_exactly_where_it_stopped(tmp_path):
    straight = tmp_path / "straight"
    run_local(FAST, straight)
    split = tmp_path / "split"
    run_local(dataclasses.replace(FAST, num_iterations=2), split)
    run_local(FAST, split, resume=True)
    rows_a = (straight / "metrics.jsonl").read_text().splitlines()
    rows_b = (split / "metrics.jsonl").read_text().splitlines()
    assert len(rows_b) == 4  # nothing trained twice, nothing skipped
    walls = [json.loads(r)["wall_s"] for r in rows_b]
    assert walls == sorted(walls)  # the clock continues across the resume
    for a, b in zip(rows_a, rows_b, strict=True):
        a, b = json.loads(a), json.loads(b)
        assert a["train_reward_mean"] == b["train_reward_mean"]
        assert a["weights_version"] == b["weights_version"]
    from safetensors.torch import load_file

    wa = load_file(str(straight / "checkpoint/policy.safetensors"))
    wb = load_file(str(split / "checkpoint/policy.safetensors"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_run_folder_mistakes_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match=r"no checkpoint/state\.json"):
        run_local(FAST, tmp_path / "empty", resume=True)
    run_local(dataclasses.replace(FAST, num_iterations=1), tmp_path / "r")
    with pytest.raises(ValueError, match="already holds a run"):
        run_local(FAST, tmp_path / "r")
    with pytest.raises(ValueError, match="used recipe 'tiny-smoke'"):
        run_local(dataclasses.replace(FAST, recipe="tiny-brightness"), tmp_path / "r", resume=True)
    (tmp_path / "r/checkpoint/policy.safetensors").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="checksum"):
        run_local(FAST, tmp_path / "r", resume=True)


def test_cli_reports_bad_input_without_a_traceback(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["train", "--recipe", "nope"])
    assert "invalid choice: 'nope'" in capsys.readouterr().err
    assert main(["train", "--resume", str(tmp_path)]) == 2
    assert "no config.json" in capsys.readouterr().err


def test_set_overrides_recipe_fields_and_refuses_bad_ones(tmp_path, capsys):
    from spotlight.overrides import apply_overrides

    out = tmp_path / "s"
    args = ["train", "--recipe", "tiny-smoke", "--runner", "local", "--out", str(out)]
    sets = ["--set", "grpo.learning_rate=2e-3", "--set", "num_iterations=1", "--set", "task=none"]
    assert main(args + sets) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["grpo"]["learning_rate"] == 2e-3 and cfg["num_iterations"] == 1
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1
    assert main(["train", "--resume", str(out), "--set", "seed=1"]) == 2
    assert "cannot change a resumed run" in capsys.readouterr().err
    for bad, match in [
        ("grpo.lr=1", "no field 'lr'; its fields: adv_clip"),
        ("grpo=1", "is a section"),
        ("num_iterations=ten", "not a valid int"),
        ("exploration.uniform=maybe", "not a valid bool"),
        ("seed", "expected KEY=VALUE"),
    ]:
        with pytest.raises(ValueError, match=match):
            apply_overrides(FAST, [bad])
    assert main([*args, "--set", "grpo.group_size=1"]) == 2  # validated like any config
    assert "group_size must be >= 2" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"grpo": GRPOConfig(group_size=1)}, "group_size must be >= 2"),
        ({"sampler": SamplerConfig(eta=0.0)}, "eta must be > 0"),
        ({"num_prompts_per_iteration": 10**6}, "not exceed num_train_prompts"),
        ({"reward": "nope"}, "unknown reward 'nope'"),
        ({"policy": PolicyConfig(name="nope")}, "unknown policy 'nope'"),
        ({"policy": PolicyConfig(options={"depth": 3})}, "bad tiny policy options"),
    ],
)
def test_bad_config_fails_before_any_work(tmp_path, change, match):
    with pytest.raises(ValueError, match=match):
        run_local(dataclasses.replace(FAST, **change), tmp_path / "x")
    assert not (tmp_path / "x/metrics.jsonl").exists()


def test_ray_runner_bad_input_fails_before_ray_starts(tmp_path, capsys, monkeypatch):
    # ray.init is forbidden in unit tests: each of these must stop before it.
    assert main(["train", "--samplers", "0", "--out", str(tmp_path / "a")]) == 2
    assert "samplers (0)" in capsys.readouterr().err
    sp = ["--sp-degree", "2", "--sp-workers", "1", "--out", str(tmp_path / "c")]
    assert main(["train", *sp]) == 2
    assert "sp workers (1) must be >= the sp degree (2)" in capsys.readouterr().err

    import spotlight.rewards as rewards

    def no_tesseract(model=None):
        raise FileNotFoundError("tesseract is not installed (apt-get install tesseract-ocr)")

    monkeypatch.setitem(rewards.REWARDS, "ocr", no_tesseract)
    assert main(["train", "--recipe", "tiny-ocr", "--out", str(tmp_path / "b")]) == 2
    assert "tesseract is not installed" in capsys.readouterr().err


def test_stale_rollouts_sample_with_the_weights_of_k_versions_ago():
    from spotlight.flow.sampler import sample
    from spotlight.policies import make_policy
    from spotlight.rewards import build_reward
    from spotlight.training.loop import ReferenceLoop

    def loop(k):
        cfg = dataclasses.replace(FAST, rollout_staleness=k)
        return ReferenceLoop(cfg, make_policy(cfg.policy, "cpu"), build_reward(cfg.reward))

    fresh, stale = loop(0), loop(2)
    rows_fresh = [fresh.run_iteration(i) for i in range(2)]
    rows_stale = [stale.run_iteration(i) for i in range(4)]
    assert [r["rollout_weights_version"] for r in rows_stale] == [0, 0, 0, 1]
    assert "rollout_weights_version" not in rows_fresh[0]
    assert rows_stale[0]["train_reward_mean"] == rows_fresh[0]["train_reward_mean"]
    # Iteration 2 sampled with the starting weights: what a new loop samples for its batch.
    start = loop(0)
    prompts, seeds, init = iteration_batch(FAST, start.train_prompts, 2, True)
    trajs = sample(start.policy, prompts, seeds, FAST.sampler, 0, init_seeds=init)
    images = start.policy.decode(torch.stack([t.latents for t in trajs]))
    want = float(torch.from_numpy(start.reward(images, prompts)).mean())
    assert rows_stale[2]["train_reward_mean"] == pytest.approx(want, abs=1e-7)
    # Iteration 3 sampled with the weights after one update: the on-policy loop's iteration 1
    # weights, on iteration 3's batch.
    one = loop(0)
    one.run_iteration(0)
    prompts, seeds, init = iteration_batch(FAST, one.train_prompts, 3, True)
    trajs = sample(one.policy, prompts, seeds, FAST.sampler, 1, init_seeds=init)
    images = one.policy.decode(torch.stack([t.latents for t in trajs]))
    want = float(torch.from_numpy(one.reward(images, prompts)).mean())
    assert rows_stale[3]["train_reward_mean"] == pytest.approx(want, abs=1e-7)


def test_stale_rollouts_are_refused_where_they_cannot_run(tmp_path):
    stale = dataclasses.replace(FAST, rollout_staleness=1)
    with pytest.raises(ValueError, match=r"exploration\.mode=off"):
        _explore(stale, mode="spot").validate()
    with pytest.raises(ValueError, match=">= 0"):
        dataclasses.replace(FAST, rollout_staleness=-1).validate()
    run_local(dataclasses.replace(stale, num_iterations=1), tmp_path / "run")
    with pytest.raises(ValueError, match="does not resume"):
        run_local(stale, tmp_path / "run", resume=True)
    from spotlight.job.run import run_ray  # refused before Ray starts

    with pytest.raises(ValueError, match="--runner local"):
        run_ray(stale, tmp_path / "ray")


def test_control_runs_permute_the_advantages_across_the_batch():
    rewards = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.2, 0.9, 0.5, 0.1])  # two groups of 4
    cfg = FAST
    control = dataclasses.replace(cfg, grpo=dataclasses.replace(cfg.grpo, shuffle_advantages=True))
    real, stats = score_groups(rewards, cfg, iteration=3)
    shuffled, control_stats = score_groups(rewards, control, iteration=3)
    assert stats == control_stats  # the reward metrics are the real ones
    assert shuffled.shape == real.shape
    assert sorted(shuffled.flatten().tolist()) == sorted(real.flatten().tolist())
    assert not torch.equal(shuffled, real)
    assert torch.equal(shuffled, score_groups(rewards, control, iteration=3)[0])  # seeded
    assert not torch.equal(shuffled, score_groups(rewards, control, iteration=4)[0])


def test_the_local_loop_shares_initial_noise_within_groups_when_asked(monkeypatch):
    import spotlight.training.loop as loop_module
    from spotlight.policies import make_policy
    from spotlight.rewards import build_reward
    from spotlight.training.loop import ReferenceLoop

    captured = []
    real_sample = loop_module.sample

    def spy(*args, **kwargs):
        trajectories = real_sample(*args, **kwargs)
        captured.append(trajectories)
        return trajectories

    monkeypatch.setattr(loop_module, "sample", spy)
    cfg = dataclasses.replace(
        FAST, sampler=dataclasses.replace(FAST.sampler, group_init_noise=True)
    )
    loop = ReferenceLoop(cfg, make_policy(cfg.policy, "cpu"), build_reward(cfg.reward))
    loop.run_iteration(0)
    (trajs,) = captured
    g = cfg.grpo.group_size
    starts = [torch.stack([t.xs[0] for t in trajs[i : i + g]]) for i in range(0, len(trajs), g)]
    assert all(torch.equal(s[0], s[k]) for s in starts for k in range(g))
    assert not torch.equal(starts[0][0], starts[1][0])
    assert len({t.seed for t in trajs}) == len(trajs)  # the step noise stays per sample


def _explore(cfg: Config, **x) -> Config:
    from spotlight.config import ExplorationConfig

    return dataclasses.replace(cfg, exploration=ExplorationConfig(**{"max_candidates": 8, **x}))


def _rows(out):
    return [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()]


def test_the_local_runner_explores_the_next_prompts_before_the_update(tmp_path):
    cfg = _explore(FAST, mode="spot", budget_seeds=16)
    run_local(cfg, tmp_path / "spot")
    rows = _rows(tmp_path / "spot")
    assert "explore_prompts" not in rows[0]  # nothing was explored before the first update
    for r in rows[1:]:
        assert r["exploration"] == "spot" and r["explore_prompts"] == 2
        assert r["seeds_explored"] == 16 and r["explore_budget_used"] == 16
        assert r["explore_weights_version"] == r["weights_version"] - 2  # one version stale
        assert r["explored_selected_group_std"] >= r["explored_random_group_std"] - 1e-12
        assert "rank_spearman_stale_fresh" in r
    assert all(r["explore_s"] > 0 for r in rows[:-1]) and "explore_s" not in rows[-1]
    planner = json.loads((tmp_path / "spot" / "bandit_state.json").read_text())["planner"]
    assert planner["arms"]  # the planner learned and kept its statistics, as the Ray job's


@pytest.mark.parametrize("group_noise", [False, True])
def test_the_local_critical_path_trains_on_the_selected_samples(tmp_path, group_noise):
    one = dataclasses.replace(FAST, num_iterations=1)
    one = dataclasses.replace(
        one, sampler=dataclasses.replace(one.sampler, group_init_noise=group_noise)
    )
    cfg = _explore(one, mode="critical_path", uniform=True)
    run_local(cfg, tmp_path / "cp")
    (row,) = _rows(tmp_path / "cp")
    assert row["explore_prompts"] == 2 and row["seeds_explored"] == 16
    assert row["explored_selected_group_std"] >= row["explored_random_group_std"] - 1e-12
    # The trained groups are the selected samples themselves (same weights).
    assert row["group_reward_std_mean"] == pytest.approx(row["explored_selected_group_std"])

    # Advantages normalized over all 8 candidates (``full_pool``): the same samples and
    # rewards, another update.
    pooled = _explore(one, mode="critical_path", uniform=True, pool_advantages=True)
    run_local(pooled, tmp_path / "pool")
    (pool_row,) = _rows(tmp_path / "pool")
    for key in ("train_reward_mean", "group_reward_std_mean", "explored_selected_group_std"):
        assert pool_row[key] == row[key]
    from safetensors.torch import load_file

    plain = load_file(str(tmp_path / "cp" / "checkpoint" / "policy.safetensors"))
    other = load_file(str(tmp_path / "pool" / "checkpoint" / "policy.safetensors"))
    assert any(not torch.equal(plain[k], other[k]) for k in plain)


def test_an_exploring_local_run_resumes_with_the_seeds_it_had_explored(tmp_path, monkeypatch):
    cfg = _explore(FAST, mode="spot", budget_seeds=16)
    run_local(cfg, tmp_path / "straight")
    state = stop_local_run_at(cfg, tmp_path / "split", 2, monkeypatch)
    assert state["iterations_done"] == 2 and state["next_selection"]["seeds"]
    # A crash after the planner's file was written and before state.json: the file is ahead
    # of the checkpoint (here, the finished run's); the resume takes the committed planner.
    ahead = json.loads((tmp_path / "straight/bandit_state.json").read_text())["planner"]
    assert state["planner"] != ahead
    shutil.copy(tmp_path / "straight/bandit_state.json", tmp_path / "split/bandit_state.json")
    run_local(cfg, tmp_path / "split", resume=True)
    keys = ("train_reward_mean", "group_reward_std_mean", "explored_selected_group_std")
    for a, b in zip(_rows(tmp_path / "straight"), _rows(tmp_path / "split"), strict=True):
        assert {k: a.get(k) for k in keys} == {k: b.get(k) for k in keys}
    from safetensors.torch import load_file

    wa = load_file(str(tmp_path / "straight/checkpoint/policy.safetensors"))
    wb = load_file(str(tmp_path / "split/checkpoint/policy.safetensors"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # the planner counted every iteration once: its statistics are the uninterrupted run's
    planners = [
        json.loads((tmp_path / d / "bandit_state.json").read_text()) for d in ("straight", "split")
    ]
    assert planners[0] == planners[1]


def test_validate_now_and_stop_reason():
    from spotlight.training.loop import stop_reason, validate_now

    cfg = dataclasses.replace(FAST, num_iterations=10, val_every=3)
    assert [it for it in range(10) if validate_now(cfg, it, 0.0)] == [2, 5, 8, 9]
    capped = dataclasses.replace(cfg, max_wall_s=60.0)
    assert validate_now(capped, 0, 60.0) and not validate_now(capped, 0, 59.9)
    assert stop_reason(capped, {"wall_s": 61.0}, 0.3) == "wall_cap"
    assert stop_reason(capped, {"wall_s": 1.0}, 0.3) is None
    target = dataclasses.replace(cfg, stop_at_val_gain=0.05)
    assert stop_reason(target, {"wall_s": 1.0, "val_reward": 0.35}, 0.3) == "target"
    assert stop_reason(target, {"wall_s": 1.0, "val_reward": 0.349}, 0.3) is None
    assert stop_reason(target, {"wall_s": 1.0}, 0.3) is None  # no validation this iteration
    assert stop_reason(cfg, {"wall_s": 1e9, "val_reward": 1.0}, 0.0) is None  # no rule set
    with pytest.raises(ValueError, match="max_wall_s"):
        dataclasses.replace(cfg, max_wall_s=0.0).validate()


def test_a_run_ends_at_its_target_and_says_so(tmp_path):
    # A gain of -1 is reached by the first validation: the run ends there.
    cfg = dataclasses.replace(FAST, num_iterations=6, stop_at_val_gain=-1.0)
    summary = run_local(cfg, tmp_path / "run")
    rows = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1]  # val_every 2: the first validation
    assert rows[-1]["stopped"] == "target" and "stopped" not in rows[0]
    assert summary["stopped"] == "target" and summary["num_iterations"] == 2
    full = run_local(dataclasses.replace(FAST, num_iterations=1), tmp_path / "full")
    assert full["stopped"] == "iterations"


def test_exploration_budget_seeds_is_validated():
    from spotlight.config import ExplorationConfig

    with pytest.raises(ValueError, match="budget_seeds"):
        ExplorationConfig(budget_seeds=-1).validate(4)
