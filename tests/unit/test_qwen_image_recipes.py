"""The paper's four Qwen-Image recipes: their published settings, and one iteration of each.

The iteration runs the recipe's objective, SDE window, LoRA targets, task prompts and model
reward on tiny random configs of the real classes (Qwen-Image, GOT-OCR 2.0, Mask2Former, CLIP),
loaded from folders through ``from_pretrained`` as on a cluster; only the sizes are cut (64 x 64
images, 2 prompts x 4 images) so that it takes seconds on a CPU.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from tiny_hf.recipes import save_tiny_models, tiny_recipe

from spotlight.cli import build_parser, ray_options_from_args
from spotlight.policies.base import FLOW_GRPO_LORA_TARGETS, LORA_TARGETS
from spotlight.recipes import NFT_OVERRIDES, RAY_HINTS, get_recipe
from spotlight.tasks import get_task
from spotlight.training.run_local import run_local

QWEN_RECIPES = (
    "qwen-image-ocr-512",
    "qwen-image-geneval-512",
    "qwen-image-ocr-1280",
    "qwen-image-geneval-1280",
)
QWEN_IMAGE_HEADS = 24


@pytest.mark.parametrize("name", QWEN_RECIPES)
def test_the_recipes_carry_flow_grpos_qwen_image_settings(name):
    cfg = get_recipe(name)
    size = int(name.rsplit("-", 1)[1])
    task = name.split("-")[2]
    assert (cfg.task, cfg.reward) == (task, f"{task}-model")
    assert cfg.policy.name == "qwen-image" and cfg.policy.checkpoint is None
    opts = cfg.policy.options
    assert (opts["height"], opts["width"]) == (size, size)
    assert (opts["lora_rank"], opts["lora_alpha"]) == (64, 128)
    assert set(opts["lora_targets"]) == set(FLOW_GRPO_LORA_TARGETS) > set(LORA_TARGETS)
    assert (cfg.grpo.group_size, cfg.num_prompts_per_iteration) == (16, 32)
    assert (cfg.grpo.loss, cfg.grpo.learning_rate, cfg.grpo.kl_beta) == ("flow_grpo", 3e-4, 0.0)
    assert cfg.grpo.clip_range == 1e-4 and cfg.grpo.timestep_fraction == 1.0
    s = cfg.sampler
    assert (s.num_steps, s.guidance_scale, s.sde_window, s.sde_eta) == (10, 4.0, (0, 2), 1.2)
    assert cfg.exploration.mode == "spot"
    assert cfg.exploration.max_candidates >= 4 * cfg.grpo.group_size  # room for the planner
    assert len(get_task(task).prompts("val")) >= cfg.num_val_prompts


@pytest.mark.parametrize("name", QWEN_RECIPES)
def test_the_1280_recipes_sample_with_sp_4_unless_told_otherwise(name):
    degree = RAY_HINTS.get(name, {}).get("sp_degree", 1)
    assert degree == (4 if name.endswith("1280") else 1)
    assert QWEN_IMAGE_HEADS % degree == 0
    parse = build_parser().parse_args
    assert ray_options_from_args(parse(["train"]), name).sp_degree == degree
    assert ray_options_from_args(parse(["train", "--sp-degree", "2"]), name).sp_degree == 2


def test_a_reward_model_folder_needs_a_reward_that_loads_one():
    cfg = dataclasses.replace(get_recipe("tiny-smoke"), reward_model="/somewhere")
    with pytest.raises(ValueError, match="loads no model"):
        cfg.validate()


def test_the_nft_option_is_a_valid_override():
    from spotlight.overrides import apply_overrides

    cfg = apply_overrides(get_recipe("qwen-image-ocr-512"), list(NFT_OVERRIDES))
    cfg.validate()
    assert cfg.grpo.loss == "nft" and cfg.grpo.nft_beta == 0.1


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return save_tiny_models(tmp_path_factory.mktemp("tiny-models"))


@pytest.mark.parametrize("name", QWEN_RECIPES)
def test_one_iteration_of_each_recipe_on_tiny_random_models(name, folders, tmp_path):
    cfg = tiny_recipe(name, folders)  # exploration off: the local loop's
    summary = run_local(cfg, tmp_path / "run", device="cpu")
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["num_samples"] == 8
    assert 0.0 <= rows[0]["train_reward_mean"] <= 1.0
    # the tiny random reward models read the same nothing in every image, so the rewards
    # (and the advantages) may all be 0: what is checked is that every stage ran, not learning
    assert rows[0]["loss/num_optimizer_steps"] >= 1 and rows[0]["loss/grad_norm"] >= 0
    assert 0.0 <= summary["final_val_reward"] <= 1.0
