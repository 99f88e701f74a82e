"""Qwen-Image's architecture with random weights (nothing downloaded): benchmarks of its code path
at full size, and the same path at a tiny size on a CPU.

:func:`random_pipeline` builds diffusers' ``QwenImageTransformer2DModel`` and
``AutoencoderKLQwenImage`` at their default (Qwen-Image's) configs, Qwen2.5-VL 7B as the text
encoder, and a small byte-level tokenizer trained here (its ids are valid for the full
vocabulary); the real weights are 58 GB and timings do not depend on their values. A policy
option ``random_weights`` ("full" or "tiny") makes ``make_policy`` build one
(:func:`random_policy`): every process that builds it gets the same weights (seed 0).
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import torch
from tokenizers import pre_tokenizers, trainers

SIZES = ("full", "tiny")
"""Values of the ``random_weights`` policy option."""

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def tokenizer(folder: Path, template: str):
    """A byte-level BPE trained here on the chat template: vocab.json + merges.txt, no download.

    Every word of the template becomes one token, so the template's system part is 34 tokens as
    with the real tokenizer (the pipeline's ``prompt_template_encode_start_idx``).
    """
    from transformers import Qwen2Tokenizer

    backend = Qwen2Tokenizer().backend_tokenizer  # Qwen2's pre-tokenizer, an empty vocabulary
    backend.add_special_tokens(list(SPECIALS))
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator([template.format("a red cat on a mat")], trainer)
    folder.mkdir()
    vocab, merges = backend.model.save(str(folder))
    tok = Qwen2Tokenizer(vocab=vocab, merges=merges)
    tok.add_special_tokens({"additional_special_tokens": list(SPECIALS[1:])})
    return tok


QWEN25_VL_7B_TEXT = {
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1_000_000.0,
    "rope_scaling": {"rope_type": "default", "mrope_section": [16, 24, 24]},
}
"""Qwen2.5-VL-7B-Instruct's language model (its config.json), Qwen-Image's text encoder."""
QWEN25_VL_7B_VISION = {
    "depth": 32,
    "hidden_size": 1280,
    "intermediate_size": 3420,
    "num_heads": 16,
    "out_hidden_size": 3584,
}
"""Its vision tower (loaded with the encoder, never run for text prompts)."""

TINY_TEXT = {
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "rope_scaling": {"rope_type": "default", "mrope_section": [1, 1, 2]},
}
TINY_VISION = {"depth": 1, "hidden_size": 16, "intermediate_size": 16, "num_heads": 2}


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def random_pipeline(device: str, dtype: torch.dtype, tiny: bool, tmp: Path):
    """A QwenImagePipeline with random weights built on ``device`` (full size unless ``tiny``)."""
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        QwenImagePipeline,
        QwenImageTransformer2DModel,
    )
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    torch.manual_seed(0)
    with torch.device(device), _default_dtype(dtype):
        if tiny:
            transformer = QwenImageTransformer2DModel(
                num_layers=2,
                num_attention_heads=2,
                attention_head_dim=16,
                joint_attention_dim=16,
                axes_dims_rope=(4, 6, 6),
            )
            vae = AutoencoderKLQwenImage(
                base_dim=8, z_dim=16, dim_mult=[1, 2, 2, 2], num_res_blocks=1
            )
        else:
            transformer = QwenImageTransformer2DModel()  # diffusers' defaults: Qwen-Image's
            vae = AutoencoderKLQwenImage()
    pipe = QwenImagePipeline(FlowMatchEulerDiscreteScheduler(), vae, None, None, transformer)
    tok = tokenizer(tmp / "tokenizer", pipe.prompt_template_encode)
    text, vision = (TINY_TEXT, TINY_VISION) if tiny else (QWEN25_VL_7B_TEXT, QWEN25_VL_7B_VISION)
    vocab = len(tok) if tiny else text["vocab_size"]
    text = {**text, "vocab_size": vocab, "bos_token_id": tok.eos_token_id}
    text["eos_token_id"] = tok.eos_token_id
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, vocab_size=vocab)
    with torch.device(device), _default_dtype(dtype):
        encoder = Qwen2_5_VLForConditionalGeneration(config).eval()
    pipe.register_modules(tokenizer=tok, text_encoder=encoder)
    return pipe


def random_policy(size: str, device: str = "cpu", lora_seed: int = 0, **options):
    """A ``QwenImagePolicy`` on random weights: bf16 at ``size`` "full", float32 "tiny"."""
    from spotlight.policies.qwen_image import QwenImagePolicy

    if size not in SIZES:
        raise ValueError(f"random_weights must be one of {SIZES}, got {size!r}")
    tiny = size == "tiny"
    dtype = torch.float32 if tiny else torch.bfloat16
    with tempfile.TemporaryDirectory() as tmp:
        pipe = random_pipeline(device, dtype, tiny, Path(tmp))
    return QwenImagePolicy(pipe, lora_seed=lora_seed, **options).to(device)
