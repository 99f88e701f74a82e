"""The tiny policy: diffusers' QwenImageTransformer2DModel (Qwen-Image's class) in pixel space.

A few million parameters that sample in tens of milliseconds on a laptop CPU, with a byte-level
text encoder. Same transformer class, token packing and RoPE as the real model, so the sampler,
the GRPO update and the Ray shell run unchanged on both.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from diffusers import QwenImageTransformer2DModel
from safetensors.torch import load_file, safe_open, save_file
from torch import nn

from spotlight.policies.base import (
    TextCond,
    check_latents,
    check_state_matches,
    qwen_transformer_velocity,
)
from spotlight.policies.text import ByteTextEncoder, tokenize

FORMAT_KEY = "spotlight_policy"


@dataclass(frozen=True)
class TinyConfig:
    """Architecture of the tiny policy (everything a checkpoint must match)."""

    height: int = 32
    """Image height in pixels."""
    width: int = 64
    """Image width in pixels."""
    channels: int = 1
    """1 = grayscale, 3 = RGB."""
    patch: int = 4
    """Pixels per token side: tokens = (height / patch) * (width / patch)."""
    num_layers: int = 4
    """Double-stream transformer blocks."""
    num_heads: int = 4
    """Attention heads."""
    head_dim: int = 32
    """Dimension per head (inner width = num_heads * head_dim)."""
    text_dim: int = 64
    """Text embedding width fed to the transformer (its joint_attention_dim)."""
    max_text_len: int = 48
    """Text tokens (bytes + BOS); prompts are padded to exactly this many."""

    def __post_init__(self) -> None:
        if self.height % self.patch or self.width % self.patch:
            raise ValueError(f"height/width {self.height}x{self.width} not divisible by patch")
        if self.head_dim % 8:
            raise ValueError(f"head_dim must be a multiple of 8, got {self.head_dim}")

    @property
    def rope_axes(self) -> tuple[int, int, int]:
        """RoPE split of head_dim over (frame, row, column); each part even, sum = head_dim."""
        frame = 2 * (self.head_dim // 8)
        row = 2 * ((self.head_dim - frame) // 4)
        return frame, row, self.head_dim - frame - row


class TinyPolicy(nn.Module):
    """Tiny text-to-image flow model, the default policy of every local run and test."""

    name = "tiny"

    def __init__(self, config: TinyConfig | None = None, seed: int = 0):
        super().__init__()
        self.config = config = config or TinyConfig()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.text_encoder = ByteTextEncoder(config.text_dim, config.max_text_len)
            self.transformer = QwenImageTransformer2DModel(
                patch_size=config.patch,
                in_channels=config.channels * config.patch**2,
                out_channels=config.channels,
                num_layers=config.num_layers,
                attention_head_dim=config.head_dim,
                num_attention_heads=config.num_heads,
                joint_attention_dim=config.text_dim,
                axes_dims_rope=config.rope_axes,
            )
        self.latent_shape = (config.channels, config.height, config.width)

    # -- Policy interface ------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.text_encoder.tok.weight.device

    def encode_prompts(self, prompts: list[str]) -> TextCond:
        ids, mask = tokenize(prompts, self.config.max_text_len)
        return self._encode(ids, mask)

    def null_cond(self, batch_size: int) -> TextCond:
        return self._encode(*self.text_encoder.null_ids(batch_size))

    def _encode(self, ids: torch.Tensor, mask: torch.Tensor) -> TextCond:
        return TextCond(self.text_encoder(ids.to(self.device)), mask.to(self.device))

    def velocity(self, latents: torch.Tensor, t: torch.Tensor, cond: TextCond) -> torch.Tensor:
        check_latents(latents, self.latent_shape, "TinyPolicy.velocity")
        return qwen_transformer_velocity(
            self.transformer, latents, t, cond, self.config.patch, "TinyPolicy.velocity"
        )

    def decode(self, latents: torch.Tensor) -> np.ndarray:
        """Pixel space: latents in [-1, 1] map to uint8 ``(B, H, W, C)``."""
        check_latents(latents, self.latent_shape, "TinyPolicy.decode")
        pixels = ((latents.detach().float().clamp(-1, 1) + 1.0) * 127.5).round().to(torch.uint8)
        return pixels.permute(0, 2, 3, 1).cpu().numpy()

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.parameters() if p.requires_grad]

    def frozen_reference(self) -> TinyPolicy:
        """The KL reference: a frozen copy of the current weights."""
        return copy.deepcopy(self).requires_grad_(False)

    def load_state_dict(self, state, strict: bool = True, assign: bool = False):  # type: ignore[override]
        check_state_matches(self.state_dict(), state, self.name)
        return super().load_state_dict(state, strict=strict, assign=assign)

    # -- Checkpoints -----------------------------------------------------------------------
    def checkpoint_metadata(self) -> dict[str, str]:
        """Safetensors metadata naming the architecture (what :meth:`load` checks)."""
        return {FORMAT_KEY: self.name, "config": json.dumps(dataclasses.asdict(self.config))}

    def save(
        self,
        path: str | Path,
        extra_metadata: dict[str, str] | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        """Write a safetensors file holding the weights (in ``dtype``) and the architecture.

        Loading casts back to the model's float32, so a float16 file is half the size.
        """
        metadata = {**self.checkpoint_metadata(), **(extra_metadata or {})}
        state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(path), metadata=metadata)

    @classmethod
    def load(cls, path: str | Path, expect: TinyConfig | None = None) -> TinyPolicy:
        """Load a checkpoint written by :meth:`save`.

        Raises:
            ValueError: the file is not a tiny-policy checkpoint, or its architecture differs from
                ``expect`` when given.
        """
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        if meta.get(FORMAT_KEY) != cls.name:
            raise ValueError(
                f"{path} is not a tiny-policy checkpoint (its {FORMAT_KEY!r} metadata is "
                f"{meta.get(FORMAT_KEY)!r})"
            )
        config = TinyConfig(**json.loads(meta["config"]))
        if expect is not None and expect != config:
            raise ValueError(f"{path} has architecture {config}, expected {expect}")
        policy = cls(config)
        policy.load_state_dict(load_file(str(path)))
        return policy
