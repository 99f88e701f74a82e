"""The Qwen-Image policy: the real 20B Qwen-Image DiT with LoRA adapters, as a Policy.

On a GPU cluster:

1. Download the weights once, on a machine with internet, into shared storage:
   ``hf download Qwen/Qwen-Image --local-dir /shared/models/Qwen-Image``.
2. Point the run at that folder: ``policy.checkpoint=/shared/models/Qwen-Image`` (this module
   never downloads anything; a missing folder is an error).
3. GPU memory: ~41 GB for the bf16 transformer + ~16 GB for the bf16 Qwen2.5-VL text encoder
   (+ the small VAE, the LoRA optimizer state and activations; enable ``gradient_checkpointing``
   for training batches), so one 80 GB+ GPU per policy replica.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch
from diffusers import QwenImagePipeline
from peft import LoraConfig
from torch import nn

from spotlight.policies.base import (
    LORA_TARGETS,
    TextCond,
    check_latents,
    check_state_matches,
    last_block_text_only,
    qwen_transformer_velocity,
)

NULL_PROMPT = " "
"""Unconditional prompt for classifier-free guidance: the single space Qwen-Image's docs use."""
PROMPT_CACHE_SIZE = 256
"""Encoded prompts kept on the device (the text encoder is frozen; ~1.8 MB each at L=256)."""
REQUIRED = ("model_index.json", "scheduler", "transformer", "vae", "text_encoder", "tokenizer")
"""What a diffusers Qwen-Image folder holds (what QwenImagePipeline.from_pretrained reads)."""


class QwenImagePolicy(nn.Module):
    """Qwen-Image as a Policy: frozen bf16 base weights, trainable LoRA on the attention.

    Latents are the VAE's normalized latent space ``(B, 16, H/8, W/8)`` (what the pipeline feeds
    its transformer before packing); prompts are encoded with the pipeline's chat template and
    padded to exactly ``max_sequence_length`` tokens. LoRA weights are kept in float32 (master
    weights for the optimizer); peft casts their inputs and outputs around the bf16 base layers.
    """

    name = "qwen-image"
    decode_batch_size = 8
    """Images the VAE decodes at once (bounds decode memory, not results)."""

    def __init__(
        self,
        pipe: QwenImagePipeline,
        lora_rank: int = 32,
        lora_alpha: float | None = None,
        height: int = 512,
        width: int = 512,
        max_sequence_length: int = 256,
        gradient_checkpointing: bool = False,
        lora_targets: tuple[str, ...] | list[str] | None = None,
        lora_seed: int = 0,
    ):
        super().__init__()
        self.transformer, self.vae = pipe.transformer, pipe.vae
        self.text_encoder, self.tokenizer = pipe.text_encoder, pipe.tokenizer
        self._template = pipe.prompt_template_encode
        self._drop_idx = pipe.prompt_template_encode_start_idx
        self.patch = self.transformer.config.patch_size
        scale, z_dim = pipe.vae_scale_factor, self.vae.config.z_dim
        _check_sizes(height, width, scale * self.patch, max_sequence_length, lora_rank)
        if self.transformer.config.in_channels != z_dim * self.patch**2:
            raise ValueError(
                f"transformer in_channels {self.transformer.config.in_channels} does not fit "
                f"the VAE's z_dim {z_dim} with patch size {self.patch}"
            )
        self.latent_shape = (z_dim, height // scale, width // scale)
        self.max_sequence_length = max_sequence_length
        self.requires_grad_(False)
        with torch.random.fork_rng(devices=[]):  # the adapters' init: a function of the seed
            torch.manual_seed(lora_seed)
            self._lora = self._add_lora(lora_rank, lora_alpha, tuple(lora_targets or LORA_TARGETS))
        self.eval()
        if gradient_checkpointing:
            self.transformer.enable_gradient_checkpointing()
        self._null: TextCond | None = None
        self._prompt_cache: OrderedDict[tuple[str, str], torch.Tensor] = OrderedDict()

    def _add_lora(
        self, rank: int, alpha: float | None, targets: tuple[str, ...]
    ) -> dict[str, nn.Parameter]:
        """Add float32 LoRA adapters on ``targets`` (module-name suffixes; default
        :data:`LORA_TARGETS`, the attention projections); return them by parameter name.

        The last block's text queries and output (``add_q_proj``, ``to_add_out``) and text MLP
        (``txt_mlp.*``) are left out: they only feed the text stream, which the transformer
        discards after that block, so an adapter there would never get a gradient.
        """
        last = f"transformer_blocks.{len(self.transformer.transformer_blocks) - 1}"
        dead = last_block_text_only(self.transformer) + [
            f"{last}.{t}" for t in targets if t.startswith("txt_mlp")
        ]
        self.transformer.add_adapter(
            LoraConfig(
                r=rank,
                lora_alpha=alpha if alpha is not None else rank,
                init_lora_weights="gaussian",
                target_modules=list(targets),
                exclude_modules=dead,
            )
        )
        lora = {n: p for n, p in self.transformer.named_parameters() if "lora_" in n}
        for p in lora.values():
            p.data = p.data.float()
            p.requires_grad_(True)
        return lora

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | str = torch.bfloat16,
        lora_rank: int = 32,
        lora_alpha: float | None = None,
        height: int = 512,
        width: int = 512,
        max_sequence_length: int = 256,
        gradient_checkpointing: bool = False,
        lora_targets: tuple[str, ...] | list[str] | None = None,
        lora_seed: int = 0,
    ) -> QwenImagePolicy:
        """Load a local diffusers-format Qwen-Image folder (never the network) and add LoRA.

        Args:
            path: Folder with model_index.json and scheduler/ transformer/ vae/ text_encoder/
                tokenizer/, e.g. from ``hf download Qwen/Qwen-Image``.
            device: Where the policy runs (components are loaded on the CPU, then moved).
            dtype: Dtype of the base weights (a torch dtype or its name, e.g. "bfloat16").
            lora_rank: LoRA rank.
            lora_alpha: LoRA alpha (default: ``lora_rank``, i.e. scale 1).
            height: Image height in pixels (a multiple of 16).
            width: Image width in pixels (a multiple of 16).
            max_sequence_length: Text tokens every prompt is padded/truncated to.
            gradient_checkpointing: Recompute transformer blocks in the backward pass.
            lora_seed: Seed of the adapters' Gaussian init (``PolicyConfig.init_seed``), so
                every process that builds the policy starts from the same adapters.
            lora_targets: Module-name suffixes that get LoRA adapters (default
                :data:`LORA_TARGETS`; ``spotlight.policies.base.FLOW_GRPO_LORA_TARGETS`` adds
                the MLPs).

        Raises:
            FileNotFoundError: the folder or one of its parts is missing.
            ValueError: bad options.
        """
        folder = find_model_folder(path)
        pipe = QwenImagePipeline.from_pretrained(
            str(folder), dtype=_as_dtype(dtype), local_files_only=True
        )
        policy = cls(
            pipe,
            lora_rank,
            lora_alpha,
            height,
            width,
            max_sequence_length,
            gradient_checkpointing,
            lora_targets,
            lora_seed,
        )
        return policy.to(device)

    # -- Policy interface ------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return next(iter(self._lora.values())).device

    @property
    def dtype(self) -> torch.dtype:
        """Dtype the transformer computes in (that of its base weights)."""
        return self.transformer.dtype

    def encode_prompts(self, prompts: list[str]) -> TextCond:
        for row, prompt in enumerate(prompts):
            if not isinstance(prompt, str) or not prompt.strip():
                raise ValueError(f"prompt {row} is empty: every prompt needs some text")
        return self._encode(list(prompts))

    def null_cond(self, batch_size: int) -> TextCond:
        """The encoding of :data:`NULL_PROMPT` (computed once per device), repeated."""
        if self._null is None or self._null.embeds.device != self.device:
            self._null = self._encode([NULL_PROMPT])
        return self._null.index([0] * batch_size)

    @torch.no_grad()
    def _encode(self, prompts: list[str]) -> TextCond:
        """Each distinct prompt encoded alone, then zero-padded to ``max_sequence_length``.

        One prompt per text-encoder forward, unpadded, so a prompt's embedding is a function of
        the prompt alone (not of the batch it came in, which would change kernel shapes).
        """
        length, dim = self.max_sequence_length, self.transformer.config.joint_attention_dim
        hidden = {p: self._cached_hidden_states(p) for p in dict.fromkeys(prompts)}
        embeds = torch.zeros(len(prompts), length, dim, dtype=self.text_encoder.dtype)
        embeds = embeds.to(self.device)
        mask = torch.zeros(len(prompts), length, dtype=torch.bool, device=self.device)
        for row, prompt in enumerate(prompts):
            n = hidden[prompt].shape[0]
            embeds[row, :n], mask[row, :n] = hidden[prompt], True
        if any(h.shape[0] == length for h in hidden.values()):
            warnings.warn(
                f"a prompt reaches max_sequence_length={length} text tokens; longer prompts are "
                "truncated",
                stacklevel=3,
            )
        return TextCond(embeds, mask)

    def _cached_hidden_states(self, prompt: str) -> torch.Tensor:
        """:meth:`_hidden_states` through a small LRU cache (the GRPO update re-reads prompts)."""
        key = (prompt, str(self.device))
        if key in self._prompt_cache:
            self._prompt_cache.move_to_end(key)
            return self._prompt_cache[key]
        value = self._hidden_states(prompt)
        self._prompt_cache[key] = value
        if len(self._prompt_cache) > PROMPT_CACHE_SIZE:
            self._prompt_cache.popitem(last=False)
        return value

    def _hidden_states(self, prompt: str) -> torch.Tensor:
        """``(n, D)``: the pipeline's ``_get_qwen_prompt_embeds`` for one prompt, n <= L.

        The chat template's system part (``prompt_template_encode_start_idx`` tokens) is dropped
        as in the pipeline. Truncating the tokens before the causal text encoder equals the
        pipeline's truncation of its outputs to ``max_sequence_length``.
        """
        tokens = self.tokenizer(
            [self._template.format(prompt)],
            max_length=self._drop_idx + self.max_sequence_length,
            truncation=True,
            return_tensors="pt",
        ).to(self.device)
        out = self.text_encoder(
            input_ids=tokens.input_ids,
            attention_mask=tokens.attention_mask,
            output_hidden_states=True,
        )
        return out.hidden_states[-1][0, self._drop_idx :]

    def velocity(self, latents: torch.Tensor, t: torch.Tensor, cond: TextCond) -> torch.Tensor:
        """Float32 velocity; the transformer runs in its own dtype (bf16)."""
        check_latents(latents, self.latent_shape, "QwenImagePolicy.velocity")
        return qwen_transformer_velocity(
            self.transformer, latents, t, cond, self.patch, "QwenImagePolicy.velocity"
        )

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> np.ndarray:
        """Un-normalize with the VAE's latents_mean/std (as the pipeline does) and decode."""
        check_latents(latents, self.latent_shape, "QwenImagePolicy.decode")
        shape = (1, self.latent_shape[0], 1, 1, 1)
        mean = torch.tensor(self.vae.config.latents_mean, device=self.device).view(shape)
        std = torch.tensor(self.vae.config.latents_std, device=self.device).view(shape)
        images = []
        for chunk in latents.split(self.decode_batch_size):
            z = chunk.to(self.device, torch.float32)[:, :, None] * std + mean
            pixels = self.vae.decode(z.to(self.vae.dtype), return_dict=False)[0][:, :, 0]
            pixels = ((pixels.float().clamp(-1, 1) + 1.0) * 127.5).round().to(torch.uint8)
            images.append(pixels.permute(0, 2, 3, 1).cpu())
        return torch.cat(images).numpy()

    def trainable_parameters(self) -> list[nn.Parameter]:
        """The LoRA parameters (the base weights are frozen)."""
        return list(self._lora.values())

    def frozen_reference(self) -> _BaseModel:
        """The KL reference: the same modules with the adapters switched off (no copy).

        LoRA starts at zero (gaussian A, zero B), so the base model is the initial policy.
        """
        return _BaseModel(self)

    def state_dict(self, *args, **kwargs) -> dict[str, torch.Tensor]:  # type: ignore[override]
        """The LoRA weights only (detached, not copied): what a weights version carries."""
        return {n: p.detach() for n, p in self._lora.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor], *args, **kwargs) -> None:  # type: ignore[override]
        """Copy LoRA weights from ``state`` (raises ValueError on other keys or shapes)."""
        check_state_matches(self.state_dict(), state, f"{self.name} LoRA")
        with torch.no_grad():
            for n, p in self._lora.items():
                p.copy_(state[n])


class _BaseModel:
    """A Policy view of a :class:`QwenImagePolicy` whose velocity runs without the LoRA."""

    def __init__(self, policy: QwenImagePolicy):
        self._policy = policy
        self.name = f"{policy.name}-base"
        self.latent_shape = policy.latent_shape

    @property
    def device(self) -> torch.device:
        return self._policy.device

    def encode_prompts(self, prompts: list[str]) -> TextCond:
        return self._policy.encode_prompts(prompts)

    def null_cond(self, batch_size: int) -> TextCond:
        return self._policy.null_cond(batch_size)

    def velocity(self, latents: torch.Tensor, t: torch.Tensor, cond: TextCond) -> torch.Tensor:
        transformer = self._policy.transformer
        transformer.disable_adapters()
        try:
            return self._policy.velocity(latents, t, cond)
        finally:
            transformer.enable_adapters()


def find_model_folder(path: str | Path) -> Path:
    """The local Qwen-Image folder ``path``; raise FileNotFoundError saying how to get it."""
    folder = Path(path).expanduser()
    missing = [part for part in REQUIRED if not (folder / part).exists()]
    if missing:
        what = "does not exist" if not folder.is_dir() else f"lacks {', '.join(missing)}"
        raise FileNotFoundError(
            f"Qwen-Image folder {str(path)!r} {what}. policy.checkpoint must be a local "
            "diffusers-format folder (Hub ids are not fetched): on a machine with internet run "
            "`hf download Qwen/Qwen-Image --local-dir /shared/models/Qwen-Image`, "
            "then set policy.checkpoint to that folder."
        )
    return folder


def _as_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """``dtype`` itself, or the torch dtype a name such as "bfloat16" names."""
    out = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
    if not isinstance(out, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}")
    return out


def _check_sizes(height: int, width: int, multiple: int, max_len: int, rank: int) -> None:
    """Raise ValueError on image sizes the VAE + patching cannot take, or bad lengths/ranks."""
    if height <= 0 or width <= 0 or height % multiple or width % multiple:
        raise ValueError(
            f"height and width must be positive multiples of {multiple}, got {height}x{width}"
        )
    if max_len < 1 or rank < 1:
        raise ValueError(f"max_sequence_length and lora_rank must be >= 1, got {max_len}, {rank}")
