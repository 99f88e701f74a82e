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
        from spotlight.policies.tiny import TinyConfig, TinyPolicy

        try:
            arch = TinyConfig(**cfg.options)
        except TypeError as e:
            raise ValueError(f"bad tiny policy options {cfg.options}: {e}") from None
        if cfg.checkpoint:
            policy = TinyPolicy.load(cfg.checkpoint, expect=arch if cfg.options else None)
        else:
            policy = TinyPolicy(arch, seed=cfg.init_seed)
        return policy.to(device)
    if cfg.name == "qwen-image":
        from spotlight.policies.qwen_image import QwenImagePolicy

        if not cfg.checkpoint:
            raise ValueError(
                "the qwen-image policy needs a local model folder: pass --checkpoint PATH "
                "(see the module docstring of spotlight.policies.qwen_image)"
            )
        try:
            return QwenImagePolicy.from_pretrained(cfg.checkpoint, device=device, **cfg.options)
        except TypeError as e:
            raise ValueError(f"bad qwen-image policy options {cfg.options}: {e}") from None
    raise ValueError(f"unknown policy {cfg.name!r}; known: {', '.join(POLICY_NAMES)}")
