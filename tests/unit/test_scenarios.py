"""The simulator's paper scenarios are the recipes' and cluster.yaml's, and docs/cluster.md's
commands are the runs the scenarios simulate."""

from __future__ import annotations

import copy
import re
import shlex
from pathlib import Path

import pytest
import yaml

from spotlight.overrides import apply_overrides
from spotlight.recipes import RAY_HINTS, get_recipe
from spotlight.sim.scenarios import (
    CLUSTER_YAML,
    PAPER_RUNS,
    SCENARIOS,
    paper_scenario,
    trained_passes,
)
from spotlight.sim.sim_model import NodeStart, Overheads, StepCosts
from spotlight.sim.simulator import update_s

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = yaml.safe_load(CLUSTER_YAML.read_text())


@pytest.mark.parametrize("name", sorted(PAPER_RUNS))
def test_a_paper_scenario_is_its_recipe(name):
    run, sc = PAPER_RUNS[name], SCENARIOS[name]
    cfg = get_recipe(run.recipe)
    assert sc.prompts_per_iteration == cfg.num_prompts_per_iteration == 32
    assert sc.group_size == cfg.grpo.group_size == 16
    assert sc.num_steps == cfg.sampler.num_steps == 10
    assert sc.batch_size == cfg.sampler.batch_size
    assert sc.explore_candidates == cfg.exploration.max_candidates
    assert sc.sp_degree == RAY_HINTS.get(run.recipe, {}).get("sp_degree", 1)
    size = cfg.policy.options["height"]
    assert sc.image_tokens == {512: 1024, 1280: 6400}[size]
    # Flow-GRPO's 2-step SDE window, both steps replayed with guidance (2 passes a step)
    assert round(sc.num_steps * sc.train_step_fraction) == 4


def test_the_paper_scenarios_gpus_come_from_the_runs_and_cluster_yaml():
    for name in PAPER_RUNS:
        sc = SCENARIOS[name]
        assert (sc.trainer_gpus, sc.sampler_gpus, sc.gpus_per_node) == (16, 32, 8)
        # the on-demand fallback: sampler_ondemand, one 8-GPU node
        assert sc.fallback_gpus == 8
    assert SCENARIOS["paper-1280"].sampler_gpus % (SCENARIOS["paper-1280"].sp_degree * 2) == 0


def test_the_update_trains_the_recipes_window():
    sc = SCENARIOS["paper-512"]
    costs = StepCosts(sample_step_s=1.0, train_step_s=1.0, model_gb=1.0)
    assert update_s(sc, costs, 16) == pytest.approx(32 * 16 * 2 * 2 / 16)


def test_trained_passes_follow_the_loss_and_guidance():
    cfg = get_recipe("qwen-image-ocr-512")
    assert trained_passes(cfg) == 4  # 2 window steps x (conditional + unconditional)
    assert trained_passes(apply_overrides(cfg, ["sampler.guidance_scale=1.0"])) == 2
    nft = apply_overrides(cfg, ["grpo.loss=nft", "grpo.nft_draws=4", "grpo.num_inner_epochs=2"])
    assert trained_passes(nft) == 8


def test_a_cluster_that_cannot_hold_the_run_is_refused():
    small = copy.deepcopy(CLUSTER)
    small["available_node_types"]["trainer"]["max_workers"] = 1
    with pytest.raises(ValueError, match=r"paper-512.*16 trainer workers \(--train-workers\)"):
        paper_scenario("paper-512", small)


def test_spot_sampler_types_of_different_sizes_are_refused():
    mixed = copy.deepcopy(CLUSTER)
    spot = [
        n
        for n, t in mixed["available_node_types"].items()
        if (t.get("resources") or {}).get("spot")
    ]
    assert len(spot) >= 2
    mixed["available_node_types"][spot[-1]]["resources"] = {
        **mixed["available_node_types"][spot[-1]]["resources"],
        "sampler_gpu": 4,
    }
    with pytest.raises(ValueError, match=r"offer \[4, 8\] sampler GPUs a node"):
        paper_scenario("paper-1280", mixed)


def test_replica_start_is_the_sum_of_a_nodes_parts():
    parts = NodeStart()
    assert parts.total_s() == pytest.approx(105 + 60 + 10 + 20 + 58 / 1.2)
    assert Overheads().replica_start_s == parts.total_s()
    assert SCENARIOS["paper-512"].overheads.replica_start_s == parts.total_s()


def _documented_runs() -> list[tuple[str, dict[str, str]]]:
    """The ``spotlight train`` commands of docs/cluster.md for a paper recipe (a smoke run,
    with ``--iterations``, left out): the recipe and the flags the scenarios set."""
    text = (ROOT / "docs" / "cluster.md").read_text()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for cmd in block.replace("\\\n", " ").splitlines():
            if "spotlight train" not in cmd:
                continue
            words = shlex.split(cmd)
            if "--iterations" in words or "--recipe" not in words:
                continue
            recipe = words[words.index("--recipe") + 1]
            if not re.fullmatch(r"qwen-image-(ocr|geneval)-(512|1280)", recipe):
                continue
            flags = {
                w: words[i + 1]
                for i, w in enumerate(words)
                if w in ("--samplers", "--sp-workers", "--train-workers")
            }
            out.append((recipe, flags))
    return out


def test_docs_cluster_commands_are_the_simulated_runs():
    runs = _documented_runs()
    assert {r.split("-")[-1] for r, _ in runs} == {"512", "1280"}
    for recipe, flags in runs:
        size = recipe.split("-")[-1]
        want = PAPER_RUNS[f"paper-{size}"].flags()
        assert flags == {k: str(v) for k, v in want.items()}, recipe
