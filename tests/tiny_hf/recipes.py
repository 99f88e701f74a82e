"""The Qwen-Image recipes cut to CPU-test size, on tiny random models saved to folders."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from spotlight.config import Config
from spotlight.recipes import get_recipe
from tiny_hf.geneval_models import save_tiny_geneval_models
from tiny_hf.got_ocr import save_tiny_ocr_model
from tiny_hf.qwen_image import save_tiny_qwen_image


def save_tiny_models(root: Path) -> dict[str, Path]:
    """Folders of a tiny Qwen-Image (``qwen``) and of each task's reward model (``ocr``,
    ``geneval``) under ``root``."""
    return {
        "qwen": save_tiny_qwen_image(root / "qwen"),
        "ocr": save_tiny_ocr_model(root / "ocr"),
        "geneval": save_tiny_geneval_models(root / "geneval"),
    }


def tiny_recipe(name: str, folders: dict[str, Path], exploration: str = "off") -> Config:
    """Recipe ``name`` with its sizes cut for a CPU test (64 x 64 images, LoRA rank 4, 2 prompts
    x 4 images, 1 iteration, 2 validation prompts); objective, SDE window, LoRA targets, task
    and reward as shipped, the models read from ``folders``."""
    cfg = get_recipe(name)
    options = {**cfg.policy.options, "height": 64, "width": 64, "max_sequence_length": 128}
    options["lora_rank"], options["lora_alpha"] = 4, 8
    return dataclasses.replace(
        cfg,
        policy=dataclasses.replace(cfg.policy, checkpoint=str(folders["qwen"]), options=options),
        reward_model=str(folders[cfg.task]),
        grpo=dataclasses.replace(cfg.grpo, group_size=4),
        num_iterations=1,
        num_prompts_per_iteration=2,
        num_val_prompts=2,
        exploration=dataclasses.replace(cfg.exploration, mode=exploration),
    )
