"""What a task is: prompts with deterministic splits, a ground-truth renderer, a reward name."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Task(Protocol):
    """A text-to-image task at laptop scale.

    ``render`` draws a correct image for a prompt (the pretraining data of the tiny base
    models); the reward named by ``reward`` scores generated images for their prompts.
    """

    name: str
    height: int
    width: int
    channels: int
    reward: str
    """Name of the reward in spotlight.rewards.REWARDS that scores this task."""

    def prompts(self, split: str) -> list[str]:
        """The fixed 'train' or 'val' prompt list (disjoint, deterministic, versioned)."""
        ...

    def sample_prompt(self, rng: np.random.Generator) -> str:
        """A random prompt from the training distribution (never a validation prompt)."""
        ...

    def render(self, prompt: str, rng: np.random.Generator) -> np.ndarray:
        """A uint8 ``(height, width, channels)`` image that satisfies ``prompt``."""
        ...
