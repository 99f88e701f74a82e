"""A pretrained-model reward for real clusters: CLIP image-prompt similarity from a local folder."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps

from spotlight.rewards.simple import check_images

DEFAULT_CLIP_PATH = "/shared/models/clip-vit-base-patch32"
"""Where ``ClipScoreReward()`` looks when neither ``path`` nor $SPOTLIGHT_CLIP_MODEL is given."""

_WEIGHTS = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json")
_TOKENIZER = ("tokenizer.json", "vocab.json")


def find_clip_folder(path: str | Path) -> Path:
    """The local CLIP folder ``path``; raise FileNotFoundError saying how to get it.

    A usable folder holds config.json, the weights, preprocessor_config.json and the tokenizer
    (tokenizer.json, or vocab.json with merges.txt).
    """
    folder = Path(path).expanduser()
    needed = {
        "config.json": ("config.json",),
        "weights (model.safetensors)": _WEIGHTS,
        "preprocessor_config.json": ("preprocessor_config.json",),
        "tokenizer (tokenizer.json or vocab.json + merges.txt)": _TOKENIZER,
    }
    missing = [
        what for what, names in needed.items() if not any((folder / n).is_file() for n in names)
    ]
    if missing:
        what = "does not exist" if not folder.is_dir() else f"lacks {', '.join(missing)}"
        raise FileNotFoundError(
            f"CLIP folder {str(path)!r} {what}. ClipScoreReward loads a local Hugging Face folder "
            "(nothing is downloaded at run time): on a machine with internet run "
            "`hf download openai/clip-vit-base-patch32 --local-dir "
            f"{DEFAULT_CLIP_PATH}`, copy it to the cluster's shared storage, and pass that folder "
            "as path (or set $SPOTLIGHT_CLIP_MODEL)."
        )
    return folder


class ClipScoreReward:
    """CLIP score: how well each image matches its prompt, by a pretrained CLIP model.

    With ``e_i``, ``e_t`` CLIP's image and prompt embeddings, ``cos = e_i . e_t / |e_i| |e_t|``
    in [-1, 1] and::

        reward = clip((cos - low) / (high - low), 0, 1)

    The default ``low=-1, high=1`` is ``(cos + 1) / 2``: exact, never clipped. Real image-caption
    pairs score cos ~ 0.2-0.4 with openai/clip-vit-base-patch32, so rewards sit near 0.6-0.7;
    GRPO standardizes rewards within each prompt's group, so the affine map does not change the
    advantages, only logged values. Pass e.g. ``low=0.0, high=0.4`` to spread them over [0, 1].

    Images are letterboxed to a square with their median color before CLIP's processor (whose
    centre crop would cut the ends off a wide 32x64 sign); grayscale is repeated to RGB.

    Args:
        path: local folder of a CLIP checkpoint in Hugging Face format; default
            $SPOTLIGHT_CLIP_MODEL, else ``DEFAULT_CLIP_PATH``.
        device: where the model runs, e.g. "cuda"; dtype: its weights' dtype.
        batch_size: images (and prompts) per forward pass.
        low, high: the cosine mapped to reward 0 and to reward 1.

    Raises:
        FileNotFoundError: the folder or a part of it is missing (says how to get it).
        ValueError: ``low >= high``.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        batch_size: int = 64,
        low: float = -1.0,
        high: float = 1.0,
    ):
        from transformers import CLIPImageProcessor, CLIPModel, CLIPTokenizer

        if not low < high:
            raise ValueError(f"ClipScoreReward: need low < high, got low={low}, high={high}")
        path = (
            path if path is not None else os.environ.get("SPOTLIGHT_CLIP_MODEL", DEFAULT_CLIP_PATH)
        )
        folder = find_clip_folder(path)
        self.device, self.batch_size = torch.device(device), batch_size
        self.low, self.high = low, high
        model = CLIPModel.from_pretrained(folder, local_files_only=True, dtype=dtype)
        self.model = model.to(self.device).eval().requires_grad_(False)
        self.tokenizer = CLIPTokenizer.from_pretrained(folder, local_files_only=True)
        self.processor = CLIPImageProcessor.from_pretrained(folder, local_files_only=True)
        self.max_length = self.model.config.text_config.max_position_embeddings

    def __call__(self, images: np.ndarray, prompts: list[str]) -> np.ndarray:
        check_images(images, prompts, "ClipScoreReward")
        cos = self.cosine(images, prompts)
        return np.clip((cos - self.low) / (self.high - self.low), 0.0, 1.0).astype(np.float32)

    @torch.no_grad()
    def cosine(self, images: np.ndarray, prompts: list[str]) -> np.ndarray:
        """Cosine similarity in [-1, 1] of each image's and its prompt's CLIP embedding."""
        if not prompts:
            return np.empty(0, np.float64)
        unique = sorted(set(prompts))  # GRPO groups repeat prompts: embed each once
        row = {p: i for i, p in enumerate(unique)}
        chunks = range(0, len(unique), self.batch_size)
        text = torch.cat([self._embed_text(unique[i : i + self.batch_size]) for i in chunks])
        out = np.empty(len(prompts), np.float64)
        for start in range(0, len(prompts), self.batch_size):
            stop = start + self.batch_size
            image = self._embed_images(images[start:stop])
            paired = text[[row[p] for p in prompts[start:stop]]]
            out[start:stop] = (image * paired).sum(-1).double().cpu().numpy()
        return out

    def _embed_text(self, prompts: list[str]) -> torch.Tensor:
        tokens = self.tokenizer(
            prompts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        ).to(self.device)
        out = self.model.get_text_features(
            input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"]
        )
        return torch.nn.functional.normalize(_pooled(out).float(), dim=-1)

    def _embed_images(self, images: np.ndarray) -> torch.Tensor:
        pixels = self.processor(images=[_square_rgb(im) for im in images], return_tensors="pt")
        values = pixels["pixel_values"].to(self.device, self.model.dtype)
        out = self.model.get_image_features(pixel_values=values)
        return torch.nn.functional.normalize(_pooled(out).float(), dim=-1)


def _pooled(out: torch.Tensor | object) -> torch.Tensor:
    """The projected embedding: transformers 5 wraps it in an output's ``pooler_output``."""
    return out if isinstance(out, torch.Tensor) else out.pooler_output


def _square_rgb(image: np.ndarray) -> Image.Image:
    """An ``(H, W, 1|3)`` uint8 image as RGB, letterboxed to a square with its median color."""
    rgb = Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image).convert("RGB")
    side = max(rgb.size)
    fill = tuple(int(v) for v in np.median(np.asarray(rgb).reshape(-1, 3), axis=0))
    return ImageOps.pad(rgb, (side, side), color=fill)
