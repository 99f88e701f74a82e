"""Named recipes: functions returning the root :class:`Config` of a run."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from spotlight.config import Config, ExplorationConfig, GRPOConfig, PolicyConfig, SamplerConfig
from spotlight.tasks import base_checkpoint

TASK_SAMPLER = SamplerConfig(num_steps=10, eta=0.7, guidance_scale=3.0, batch_size=8)
"""Sampling for the task recipes and `spotlight eval`: CFG 3 reads far better on the tiny base
models than no guidance (docs/tasks.md)."""


def tiny_brightness() -> Config:
    """Tiny DiT from a random init, brightness reward: a minute on 2 CPU cores."""
    return Config(
        recipe="tiny-brightness",
        policy=PolicyConfig(name="tiny", init_seed=0),
        sampler=SamplerConfig(num_steps=10, eta=0.7, batch_size=8),
        grpo=GRPOConfig(
            group_size=8, learning_rate=3e-4, timestep_fraction=0.5, train_batch_size=16
        ),
        reward="brightness",
        num_iterations=20,
        num_prompts_per_iteration=4,
    )


def tiny_smoke() -> Config:
    """Seconds-long run for tests: 2 prompts x 4 images, 4 steps."""
    return Config(
        recipe="tiny-smoke",
        policy=PolicyConfig(
            name="tiny", init_seed=0, options={"num_layers": 2, "num_heads": 2, "head_dim": 16}
        ),
        sampler=SamplerConfig(num_steps=4, eta=0.7, batch_size=8),
        grpo=GRPOConfig(
            group_size=4, learning_rate=1e-3, timestep_fraction=0.5, train_batch_size=8
        ),
        reward="brightness",
        num_iterations=3,
        num_prompts_per_iteration=2,
    )


def qwen_image_brightness() -> Config:
    """Qwen-Image (LoRA, bf16) on a GPU node; pass the local model folder with --checkpoint."""
    return Config(
        recipe="qwen-image-brightness",
        policy=PolicyConfig(
            name="qwen-image",
            checkpoint=None,
            options={"lora_rank": 32, "height": 512, "width": 512, "gradient_checkpointing": True},
        ),
        sampler=SamplerConfig(num_steps=10, eta=0.7, shift=3.0, guidance_scale=4.0, batch_size=8),
        grpo=GRPOConfig(
            group_size=16,
            learning_rate=1e-4,
            kl_beta=0.04,
            timestep_fraction=0.6,
            train_batch_size=4,
        ),
        reward="brightness",
        num_iterations=100,
        num_prompts_per_iteration=8,
    )


def _tiny_task(task: str, reward: str) -> Config:
    return Config(
        recipe=f"tiny-{task.removesuffix('-mini')}",
        policy=PolicyConfig(name="tiny", checkpoint=base_checkpoint(task)),
        sampler=TASK_SAMPLER,
        # Full fine-tuning of a 2.5 M model: Adam steps of 1e-4 (4 per iteration) collapsed
        # OCR-mini's reward within 7 iterations; 1e-5 with one step per iteration is stable
        # (docs/tasks.md).
        grpo=GRPOConfig(
            group_size=8, learning_rate=1e-5, timestep_fraction=0.5, train_batch_size=64
        ),
        reward=reward,
        task=task,
        num_iterations=30,
        num_prompts_per_iteration=8,
        num_train_prompts=2000,
        num_val_prompts=64,
        num_val_seeds=2,
        val_every=10,
    )


def tiny_ocr() -> Config:
    """OCR-mini from the shipped v2 base model, scored by Tesseract, trained with DiffusionNFT
    and seed exploration on: the embedded default, and the recipe that raises the validation
    reward on a 2-core CPU (docs/tasks.md, "RL that learns: OCR-mini v2"; docs/bench/
    learn-ocr-mini.json). 40 iterations of 8 prompts x 8 images; validation on 128 prompts x 4
    fixed seeds at 0, 20 and 40.

    Flow-GRPO's gradient carried no signal above its control at this batch size
    (grpo_signal-tiny-ocr-v2.json), DiffusionNFT's did; at lr 1e-4 NFT collapsed (0.218 ->
    0.119 in 20 iterations), at 2e-5 it rose."""
    cfg = _tiny_task("ocr-mini", "ocr")
    return dataclasses.replace(
        cfg,
        grpo=dataclasses.replace(cfg.grpo, loss="nft", learning_rate=2e-5, nft_draws=4),
        num_iterations=40,
        num_val_prompts=128,
        num_val_seeds=4,
        val_every=20,
        exploration=ExplorationConfig(mode="spot"),
    )


def tiny_geneval() -> Config:
    """GenEval-mini from the shipped base model, scored by the rule-based detector."""
    return _tiny_task("geneval-mini", "geneval")


RECIPES: dict[str, Callable[[], Config]] = {
    "tiny-ocr": tiny_ocr,
    "tiny-geneval": tiny_geneval,
    "tiny-brightness": tiny_brightness,
    "tiny-smoke": tiny_smoke,
    "qwen-image-brightness": qwen_image_brightness,
}
DEFAULT_RECIPE = "tiny-ocr"


def get_recipe(name: str) -> Config:
    """The config of recipe ``name``, validated."""
    try:
        cfg = RECIPES[name]()
    except KeyError:
        raise ValueError(f"unknown recipe {name!r}; known: {', '.join(RECIPES)}") from None
    cfg.validate()
    return cfg
