"""What every DiT policy offers the sampler and the trainer, whatever the model family."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from spotlight.policies.lora import FLOW_GRPO_LORA_TARGETS, LORA_TARGETS  # noqa: F401 (re-exported)


def last_block_text_only(transformer: torch.nn.Module) -> list[str]:
    """Names of the last block's attention projections that only feed the text stream, which
    the transformer discards after that block: the text queries ``add_q_proj`` (they only
    make the text tokens' attention output) and ``to_add_out``. A LoRA adapter there never gets
    a gradient."""
    last = f"transformer_blocks.{len(transformer.transformer_blocks) - 1}.attn"
    return [f"{last}.add_q_proj", f"{last}.to_add_out"]


@dataclass
class TextCond:
    """Encoded prompts: ``embeds (B, L, D)`` and a boolean ``mask (B, L)`` of real tokens."""

    embeds: torch.Tensor
    mask: torch.Tensor

    def __len__(self) -> int:
        return self.embeds.shape[0]

    def index(self, idx: torch.Tensor | list[int]) -> TextCond:
        """Rows ``idx`` (e.g. to repeat one prompt G times)."""
        idx_t = torch.as_tensor(idx, dtype=torch.long, device=self.embeds.device)
        return TextCond(self.embeds.index_select(0, idx_t), self.mask.index_select(0, idx_t))

    @staticmethod
    def cat(parts: list[TextCond]) -> TextCond:
        """Concatenate along the batch (all parts share L, as every policy pads to a fixed L)."""
        return TextCond(
            torch.cat([p.embeds for p in parts], 0), torch.cat([p.mask for p in parts], 0)
        )


class Policy(Protocol):
    """A text-to-image flow-matching model as the sampler and the GRPO update see it.

    Latents are unpacked image-space tensors ``(B, C, H, W)`` of shape ``(B, *latent_shape)``;
    each policy packs them into tokens for its transformer internally.
    """

    name: str
    latent_shape: tuple[int, int, int]

    @property
    def device(self) -> torch.device:
        """Where the model runs (inputs are moved there)."""
        ...

    def encode_prompts(self, prompts: list[str]) -> TextCond:
        """Encode prompts (raises ValueError on an empty prompt)."""
        ...

    def null_cond(self, batch_size: int) -> TextCond:
        """The unconditional prompt used by classifier-free guidance."""
        ...

    def velocity(self, latents: torch.Tensor, t: torch.Tensor, cond: TextCond) -> torch.Tensor:
        """Predicted flow velocity ``eps - x0`` at times ``t (B,)`` in [0, 1]."""
        ...

    def decode(self, latents: torch.Tensor) -> np.ndarray:
        """Final latents to uint8 images ``(B, H, W, C)``."""
        ...

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """Parameters the GRPO update changes (all of the tiny model or its LoRA adapters; LoRA
        for large models)."""
        ...

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Trainable state: what a weights version carries. The tensors are the live weights
        (detached, not copied): clone them before the next optimizer step changes them."""
        ...

    def frozen_reference(self) -> Policy:
        """A frozen policy equal to the current one, for the KL term (a copy, or a view)."""
        ...

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Load a state produced by ``state_dict`` (raises ValueError on a wrong architecture)."""
        ...


def check_latents(latents: torch.Tensor, latent_shape: tuple[int, ...], who: str) -> None:
    """Raise a clear error when ``latents`` is not ``(B, *latent_shape)``."""
    if latents.dim() != 1 + len(latent_shape) or tuple(latents.shape[1:]) != tuple(latent_shape):
        raise ValueError(
            f"{who}: latents must have shape (B, {', '.join(map(str, latent_shape))}), "
            f"got {tuple(latents.shape)}"
        )


def check_times(t: torch.Tensor, batch: int, who: str) -> None:
    """Raise a clear error when ``t`` is not ``(B,)`` with values in [0, 1]."""
    if t.shape != (batch,):
        raise ValueError(f"{who}: t must have shape ({batch},), got {tuple(t.shape)}")
    if bool(((t < 0) | (t > 1) | torch.isnan(t)).any()):
        raise ValueError(f"{who}: t must lie in [0, 1], got min {t.min():.4g} max {t.max():.4g}")


def qwen_transformer_velocity(
    transformer: torch.nn.Module,
    latents: torch.Tensor,
    t: torch.Tensor,
    cond: TextCond,
    patch: int,
    who: str,
) -> torch.Tensor:
    """Run a ``QwenImageTransformer2DModel`` on unpacked latents; float32 velocity out.

    Checks the batch of ``t`` and ``cond`` against ``latents``, packs ``patch`` x ``patch``
    patches like the QwenImage pipelines, runs in the transformer's device and dtype, unpacks.
    """
    batch, (c, h, w) = latents.shape[0], latents.shape[1:]
    check_times(t, batch, who)
    if len(cond) != batch:
        raise ValueError(f"{who}: {len(cond)} prompts for {batch} latents")
    param = next(transformer.parameters())
    tokens = pack_patches(latents.to(param.device, param.dtype), patch)
    out = transformer(
        hidden_states=tokens,
        encoder_hidden_states=cond.embeds.to(param.device, param.dtype),
        encoder_hidden_states_mask=cond.mask.to(param.device),
        timestep=t.to(param.device, param.dtype),
        img_shapes=[[(1, h // patch, w // patch)]] * batch,
        return_dict=False,
    )[0]
    return unpack_patches(out.float(), c, h, w, patch)


def check_state_matches(
    own: dict[str, torch.Tensor], other: dict[str, torch.Tensor], what: str
) -> None:
    """Raise ValueError naming missing, unexpected and mis-shaped keys of a state dict."""
    missing = sorted(set(own) - set(other))
    unexpected = sorted(set(other) - set(own))
    shapes = [
        f"{k}: {tuple(other[k].shape)} vs {tuple(own[k].shape)}"
        for k in sorted(set(own) & set(other))
        if other[k].shape != own[k].shape
    ]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing (e.g. {missing[:3]})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected (e.g. {unexpected[:3]})")
        if shapes:
            parts.append(f"{len(shapes)} with other shapes (e.g. {shapes[:3]})")
        raise ValueError(f"checkpoint does not fit the {what} architecture: " + "; ".join(parts))


def pack_patches(x: torch.Tensor, patch: int) -> torch.Tensor:
    """``(B, C, H, W) -> (B, (H/p)(W/p), C p^2)``, the token layout of QwenImage pipelines."""
    b, c, h, w = x.shape
    x = x.view(b, c, h // patch, patch, w // patch, patch).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // patch) * (w // patch), c * patch * patch)


def unpack_patches(tokens: torch.Tensor, c: int, h: int, w: int, patch: int) -> torch.Tensor:
    """Inverse of :func:`pack_patches`."""
    b = tokens.shape[0]
    x = tokens.view(b, h // patch, w // patch, c, patch, patch).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(b, c, h, w)
