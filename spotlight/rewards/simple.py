"""Deterministic image rewards that need nothing installed: for tests and smoke runs."""

from __future__ import annotations

import numpy as np


def check_images(images: np.ndarray, prompts: list[str], who: str) -> None:
    """Raise ValueError unless ``images`` is uint8 ``(N, H, W, C)`` with one prompt per image."""
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8:
        raise ValueError(
            f"{who}: images must be a uint8 numpy array, got "
            f"{type(images).__name__} {getattr(images, 'dtype', '')}"
        )
    if images.ndim != 4 or images.shape[-1] not in (1, 3):
        raise ValueError(f"{who}: images must be (N, H, W, 1|3), got {images.shape}")
    if len(prompts) != images.shape[0]:
        raise ValueError(f"{who}: {images.shape[0]} images but {len(prompts)} prompts")


class BrightnessReward:
    """``r = 1 - |mean pixel / 255 - target|``: highest for images of mean brightness ``target``.

    Prompt-independent on purpose: a signal any model can learn in a few GRPO iterations, used
    to show the loop moves a reward before the task rewards exist.
    """

    def __init__(self, target: float = 0.8):
        if not 0.0 <= target <= 1.0:
            raise ValueError(f"target brightness must be in [0, 1], got {target}")
        self.target = target

    def __call__(self, images: np.ndarray, prompts: list[str]) -> np.ndarray:
        check_images(images, prompts, "BrightnessReward")
        mean = images.reshape(images.shape[0], -1).mean(axis=1) / 255.0
        return (1.0 - np.abs(mean - self.target)).astype(np.float32)
