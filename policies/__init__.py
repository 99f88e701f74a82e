"""DiT policies, one file per model family; :func:`make_policy` builds one from its config."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spotlight.config import PolicyConfig
    from spotlight.policies.base import Policy

POLICY_NAMES = ("tiny", "qwen-image")


def make_policy(cfg: PolicyConfig, device: str = "cpu") -> Policy:
    """Construct the policy a config names (imports the family's module only when asked for).

    Raises:
        ValueError: unknown policy name, bad options, or a checkpoint of another architecture.
    """
    if cfg.name == "tiny":
        from spotlight.policies.tiny import LORA_OPTIONS, TinyConfig, TinyLoRA, TinyPolicy

        # TinyConfig fields fix the architecture; lora_rank / lora_alpha / lora_targets add
        # LoRA adapters (lora_rank 0 or absent: full fine-tuning).
        arch_options = {k: v for k, v in cfg.options.items() if k not in LORA_OPTIONS}
        try:
            arch = TinyConfig(**arch_options)
        except TypeError as e:
            raise ValueError(f"bad tiny policy options {cfg.options}: {e}") from None
        lora = TinyLoRA.from_options(cfg.options)
        if cfg.checkpoint:
            policy = TinyPolicy.load(
                cfg.checkpoint,
                expect=arch if arch_options else None,
                lora=lora,
                seed=cfg.init_seed,
            )
        else:
            policy = TinyPolicy(arch, seed=cfg.init_seed, lora=lora)
        return policy.to(device)
    if cfg.name == "qwen-image":
        from spotlight.policies.qwen_image import QwenImagePolicy

        if "random_weights" in cfg.options:  # benchmarks: random weights, nothing loaded
            from spotlight.policies.qwen_random import random_policy

            options = {k: v for k, v in cfg.options.items() if k != "random_weights"}
            size = cfg.options["random_weights"]
            return random_policy(size, device, lora_seed=cfg.init_seed, **options)
        if not cfg.checkpoint:
            raise ValueError(
                "the qwen-image policy needs a local model folder: pass --checkpoint PATH "
                "(see the module docstring of spotlight.policies.qwen_image)"
            )
        try:
            return QwenImagePolicy.from_pretrained(
                cfg.checkpoint, device=device, lora_seed=cfg.init_seed, **cfg.options
            )
        except TypeError as e:
            raise ValueError(f"bad qwen-image policy options {cfg.options}: {e}") from None
    raise ValueError(f"unknown policy {cfg.name!r}; known: {', '.join(POLICY_NAMES)}")
