"""The tiny policy: diffusers' QwenImageTransformer2DModel (Qwen-Image's class) in pixel space.

A few million parameters that sample in tens of milliseconds on a laptop CPU, with a byte-level
text encoder. Same transformer class, token packing and RoPE as the real model, so the sampler,
the GRPO update and the Ray shell run unchanged on both.

Full fine-tuning by default; with a :class:`TinyLoRA` (policy options ``lora_rank``,
``lora_alpha``, ``lora_targets``) peft LoRA adapters on the attention projections are trained
instead, as for Qwen-Image, and everything else is frozen. A LoRA policy's ``state_dict`` (what
checkpoints and the weight broadcast carry) holds the base weights *and* the adapters, under
peft's names (``...to_q.base_layer.weight``, ``...to_q.lora_A.default.weight``), so any process
that builds the same policy can load it; its checkpoint metadata records the LoRA settings, so
:meth:`TinyPolicy.load` rebuilds the adapters before loading.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from diffusers import QwenImageTransformer2DModel
from safetensors.torch import load_file, safe_open, save_file
from torch import nn

from spotlight.policies.base import (
    LORA_TARGETS,
    TextCond,
    check_latents,
    check_state_matches,
    last_block_text_only,
    qwen_transformer_velocity,
)
from spotlight.policies.text import ByteTextEncoder, tokenize

FORMAT_KEY = "spotlight_policy"
LORA_KEY = "lora"
"""Checkpoint metadata key of a LoRA policy's :class:`TinyLoRA` (JSON); absent without LoRA."""
LORA_OPTIONS = ("lora_rank", "lora_alpha", "lora_targets")
"""Policy options (``PolicyConfig.options``) that configure LoRA rather than the architecture."""


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


@dataclass(frozen=True)
class TinyLoRA:
    """LoRA adapters (peft) on the tiny transformer: trained instead of the whole model."""

    rank: int = 8
    """LoRA rank r (policy option ``lora_rank``; 0 there means full fine-tuning, no adapters)."""
    alpha: float | None = None
    """LoRA alpha (option ``lora_alpha``): the update is scaled by alpha / r; None = r."""
    targets: tuple[str, ...] = LORA_TARGETS
    """Module-name suffixes in the transformer that get adapters (option ``lora_targets``),
    matched as peft matches them (e.g. ``to_q`` is every block's ``attn.to_q``); the default is
    the attention projections of both streams. The last block's text-only projections
    (``attn.add_q_proj``, ``attn.to_add_out``) are always left out: they never get a
    gradient."""

    def __post_init__(self) -> None:
        if isinstance(self.targets, list):  # from JSON
            object.__setattr__(self, "targets", tuple(self.targets))
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(f"LoRA rank must be an int >= 1, got {self.rank!r}")
        if self.alpha is not None and (
            isinstance(self.alpha, bool)
            or not isinstance(self.alpha, int | float)
            or not self.alpha > 0
        ):
            raise ValueError(
                f"LoRA alpha must be a number > 0 (or None = rank), got {self.alpha!r}"
            )
        if (
            not isinstance(self.targets, tuple)
            or not self.targets
            or not all(isinstance(t, str) and t for t in self.targets)
        ):
            raise ValueError(
                f"LoRA targets must be a non-empty list of module names, got {self.targets!r}"
            )

    @staticmethod
    def from_options(options: dict[str, Any]) -> TinyLoRA | None:
        """The LoRA that policy options ask for (None: ``lora_rank`` 0 or absent).

        Raises:
            ValueError: bad values, or ``lora_alpha``/``lora_targets`` without a ``lora_rank``.
        """
        rank = options.get("lora_rank", 0)
        if rank == 0 and not isinstance(rank, bool):
            extra = [k for k in ("lora_alpha", "lora_targets") if k in options]
            if extra:
                raise ValueError(
                    f"policy options {extra} need lora_rank >= 1 (lora_rank 0: full fine-tuning)"
                )
            return None
        return TinyLoRA(
            rank=rank,
            alpha=options.get("lora_alpha"),
            targets=options.get("lora_targets", LORA_TARGETS),
        )


class TinyPolicy(nn.Module):
    """Tiny text-to-image flow model, the default policy of every local run and test."""

    name = "tiny"

    def __init__(
        self, config: TinyConfig | None = None, seed: int = 0, lora: TinyLoRA | None = None
    ):
        """A randomly initialised policy (seeded; the global RNG is left alone), with LoRA
        adapters when ``lora`` is given (their random half seeded from ``seed`` too)."""
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
        self.lora: TinyLoRA | None = None
        """The LoRA adapters trained instead of the whole model (None: full fine-tuning)."""
        if lora is not None:
            self.add_lora(lora, seed)

    def add_lora(self, lora: TinyLoRA, seed: int = 0) -> None:
        """Freeze the model and add trainable LoRA adapters (peft, ``init_lora_weights=
        'gaussian'`` as Flow-GRPO: A random, drawn from a seed derived from ``seed``, B = 0, so
        the velocity is unchanged until the first optimizer step).

        Raises:
            ValueError: the policy already has adapters, or a target names no linear layer.
        """
        from peft import LoraConfig

        if self.lora is not None:
            raise ValueError(f"the policy already has LoRA adapters ({self.lora})")
        linear = [n for n, m in self.transformer.named_modules() if isinstance(m, nn.Linear)]
        unmatched = [
            t for t in lora.targets if not any(n == t or n.endswith("." + t) for n in linear)
        ]
        if unmatched:
            raise ValueError(
                f"LoRA targets {unmatched} match no linear layer of the tiny transformer (e.g."
                f" {', '.join(LORA_TARGETS)}, img_mlp.net.2, proj_out)"
            )
        self.requires_grad_(False)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(_lora_seed(seed))
            self.transformer.add_adapter(
                LoraConfig(
                    r=lora.rank,
                    lora_alpha=lora.alpha if lora.alpha is not None else lora.rank,
                    init_lora_weights="gaussian",
                    target_modules=list(lora.targets),
                    exclude_modules=last_block_text_only(self.transformer),
                )
            )
        for p in lora_parameters(self.transformer):
            p.requires_grad_(True)
        self.lora = lora

    def base_state_dict(self) -> dict[str, torch.Tensor]:
        """The base model's weights under plain (non-peft) names: the state of this policy with
        the adapters removed (the policy itself without LoRA)."""
        state = self.state_dict()
        if self.lora is None:
            return state
        return {k.replace(".base_layer.", "."): v for k, v in state.items() if ".lora_" not in k}

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
        """Every parameter, or with LoRA only the adapters' (the rest is frozen)."""
        if self.lora is not None:
            return lora_parameters(self.transformer)
        return [p for p in self.parameters() if p.requires_grad]

    def frozen_reference(self) -> TinyPolicy:
        """The KL reference: a frozen copy of the current weights; with LoRA, of the base model
        (the adapters left out: the initial policy, since LoRA starts at B = 0)."""
        if self.lora is None:
            return copy.deepcopy(self).requires_grad_(False)
        ref = TinyPolicy(self.config)
        ref.load_state_dict({k: v.detach().clone() for k, v in self.base_state_dict().items()})
        return ref.to(self.device).requires_grad_(False)

    def load_state_dict(self, state, strict: bool = True, assign: bool = False):  # type: ignore[override]
        what = self.name if self.lora is None else f"{self.name} LoRA (rank {self.lora.rank})"
        check_state_matches(self.state_dict(), state, what)
        return super().load_state_dict(state, strict=strict, assign=assign)

    # -- Checkpoints -----------------------------------------------------------------------
    def checkpoint_metadata(self) -> dict[str, str]:
        """Safetensors metadata naming the architecture and the LoRA (what :meth:`load` reads)."""
        meta = {FORMAT_KEY: self.name, "config": json.dumps(dataclasses.asdict(self.config))}
        if self.lora is not None:
            meta[LORA_KEY] = json.dumps(dataclasses.asdict(self.lora))
        return meta

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
    def load(
        cls,
        path: str | Path,
        expect: TinyConfig | None = None,
        lora: TinyLoRA | None = None,
        seed: int = 0,
    ) -> TinyPolicy:
        """Load a checkpoint written by :meth:`save`.

        A checkpoint of a LoRA policy loads with its adapters (its metadata names them); one
        without adapters gets fresh ones when ``lora`` is given (seeded by ``seed``): how a LoRA
        run starts from a pretrained base checkpoint.

        Raises:
            ValueError: the file is not a tiny-policy checkpoint, its architecture differs from
                ``expect`` when given, or it holds other LoRA adapters than ``lora``.
        """
        meta = checkpoint_metadata(path)
        config = TinyConfig(**json.loads(meta["config"]))
        if expect is not None and expect != config:
            raise ValueError(f"{path} has architecture {config}, expected {expect}")
        saved = TinyLoRA(**json.loads(meta[LORA_KEY])) if LORA_KEY in meta else None
        if saved is not None and lora is not None and saved != lora:
            raise ValueError(f"{path} holds LoRA adapters {saved}, expected {lora}")
        policy = cls(config, lora=saved)
        policy.load_state_dict(load_file(str(path)))
        if saved is None and lora is not None:
            policy.add_lora(lora, seed)
        return policy


def checkpoint_metadata(path: str | Path) -> dict[str, str]:
    """The metadata of a tiny-policy checkpoint, read from its header only (cheap).

    Raises:
        ValueError: naming the problem: no such file, not a safetensors file, or a safetensors
            file that is not a tiny-policy checkpoint.
    """
    from safetensors import SafetensorError

    if not Path(path).is_file():
        raise ValueError(f"checkpoint {path}: no such file")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
    except (SafetensorError, OSError) as e:
        raise ValueError(f"{path} is not a safetensors checkpoint ({e})") from None
    if meta.get(FORMAT_KEY) != TinyPolicy.name or "config" not in meta:
        raise ValueError(
            f"{path} is not a tiny-policy checkpoint (its {FORMAT_KEY!r} metadata is "
            f"{meta.get(FORMAT_KEY)!r})"
        )
    return meta


def checkpoint_config(path: str | Path) -> TinyConfig:
    """The architecture of a tiny-policy checkpoint (see :func:`checkpoint_metadata`).

    Raises:
        ValueError: also when its ``config`` metadata is not a tiny architecture (not JSON,
            other fields, values that are not positive integers or do not fit together).
    """
    try:
        fields = json.loads(checkpoint_metadata(path)["config"])
        if not isinstance(fields, dict) or not all(
            type(v) is int and v > 0 for v in fields.values()
        ):
            raise ValueError(f"fields must be positive integers: {fields}")
        return TinyConfig(**fields)
    except (TypeError, ValueError) as e:
        if str(e).startswith(str(path)):  # checkpoint_metadata's own message
            raise
        raise ValueError(f"{path}: its architecture metadata is not a tiny config ({e})") from None


def check_checkpoint_tensors(path: str | Path) -> None:
    """Refuse a tiny-policy checkpoint whose tensors are not those of its architecture (other
    names or shapes: a hand-edited or mixed-up file), from the header only; the model is built
    on the meta device (no memory).

    Raises:
        ValueError: naming the first tensor that differs.
    """
    config = checkpoint_config(path)
    meta = checkpoint_metadata(path)
    lora = TinyLoRA(**json.loads(meta[LORA_KEY])) if LORA_KEY in meta else None
    with torch.device("meta"):
        want = {k: tuple(v.shape) for k, v in TinyPolicy(config, lora=lora).state_dict().items()}
    with safe_open(str(path), framework="pt") as f:
        have = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
    for name in sorted(set(want) | set(have)):
        if want.get(name) != have.get(name):
            raise ValueError(
                f"{path}: tensor {name} is {have.get(name, 'missing')}, its architecture"
                f" needs {want.get(name, 'none')}"
            )


def lora_parameters(module: nn.Module) -> list[nn.Parameter]:
    """The LoRA parameters of ``module`` (peft names them ``...lora_A...``, ``...lora_B...``)."""
    return [p for n, p in module.named_parameters() if ".lora_" in n]


def _lora_seed(seed: int) -> int:
    """Seed of the LoRA adapters' initialisation: derived from the policy seed, so the adapters
    do not repeat the draws of the base model's initialisation."""
    return (seed * 1_000_003 + 0x10A) % 2**63
