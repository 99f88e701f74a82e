"""A tiny random Qwen-Image in diffusers format, with a byte-level BPE tokenizer trained here.

The components are tiny configs of the real classes (``QwenImageTransformer2DModel``,
``AutoencoderKLQwenImage``, ``Qwen2_5_VLForConditionalGeneration``); ``QwenImagePolicy`` and the
pipeline load the folder through their real ``from_pretrained``. Nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path

import torch
from diffusers import (
    AutoencoderKLQwenImage,
    FlowMatchEulerDiscreteScheduler,
    QwenImagePipeline,
    QwenImageTransformer2DModel,
)
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

from spotlight.policies.qwen_random import SPECIALS, tokenizer  # noqa: F401


def text_encoder(vocab_size: int, eos: int) -> Qwen2_5_VLForConditionalGeneration:
    text = {
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "vocab_size": vocab_size,
        "bos_token_id": eos,
        "eos_token_id": eos,
        "rope_scaling": {"rope_type": "default", "mrope_section": [1, 1, 2]},
    }
    vision = {"depth": 1, "hidden_size": 16, "intermediate_size": 16, "num_heads": 2}
    config = Qwen2_5_VLConfig(
        text_config=text, vision_config={**vision, "out_hidden_size": 16}, vocab_size=vocab_size
    )
    return Qwen2_5_VLForConditionalGeneration(config).eval()


def save_tiny_qwen_image(folder: Path, num_attention_heads: int = 2) -> Path:
    """A diffusers-format folder ``folder/model`` laid out like Qwen/Qwen-Image, with tiny
    random weights (2 layers of ``num_attention_heads`` heads of 16); returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    transformer = QwenImageTransformer2DModel(
        num_layers=2,
        num_attention_heads=num_attention_heads,
        attention_head_dim=16,
        in_channels=64,
        out_channels=16,
        joint_attention_dim=16,
        axes_dims_rope=(4, 6, 6),
    )
    vae = AutoencoderKLQwenImage(base_dim=8, z_dim=16, dim_mult=[1, 2, 2, 2], num_res_blocks=1)
    pipe = QwenImagePipeline(FlowMatchEulerDiscreteScheduler(), vae, None, None, transformer)
    tok = tokenizer(folder / "tokenizer_files", pipe.prompt_template_encode)
    pipe.register_modules(tokenizer=tok, text_encoder=text_encoder(len(tok), tok.eos_token_id))
    pipe.save_pretrained(folder / "model")
    return folder / "model"
