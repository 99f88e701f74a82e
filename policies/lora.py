"""Which modules of a Qwen-Image transformer get LoRA adapters (no torch: the recipes name
them, and the simulator builds its paper scenarios from the recipes)."""

from __future__ import annotations

LORA_TARGETS = (
    "to_q",
    "to_k",
    "to_v",
    "to_out.0",
    "add_q_proj",
    "add_k_proj",
    "add_v_proj",
    "to_add_out",
)
"""Attention projections of the image and text streams of a ``QwenImageTransformer2DModel``
that get LoRA adapters (all blocks): module-name suffixes, as peft matches them."""
FLOW_GRPO_LORA_TARGETS = (
    *LORA_TARGETS,
    "img_mlp.net.0.proj",
    "img_mlp.net.2",
    "txt_mlp.net.0.proj",
    "txt_mlp.net.2",
)
"""Flow-GRPO's LoRA targets for Qwen-Image (yifan123/flow_grpo,
``scripts/train_qwenimage_edit_plus.py``: rank 64, alpha 128, Gaussian init): the attention
projections and both streams' MLPs."""
