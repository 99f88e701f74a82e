"""Image rewards behind one interface: ``reward(images, prompts) -> (N,) float32 in [0, 1]``.

``images`` is uint8 ``(N, H, W, C)``; each reward checks its input and names what is wrong.
The task rewards (OCR, GenEval-mini) join this registry as they land.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from spotlight.rewards.simple import BrightnessReward, check_images

Reward = Callable[[np.ndarray, list[str]], np.ndarray]

REWARDS: dict[str, Callable[[], Reward]] = {
    "brightness": BrightnessReward,
}


def build_reward(name: str) -> Reward:
    """Construct a reward by name."""
    try:
        return REWARDS[name]()
    except KeyError:
        raise ValueError(f"unknown reward {name!r}; known: {', '.join(sorted(REWARDS))}") from None


__all__ = ["REWARDS", "BrightnessReward", "Reward", "build_reward", "check_images"]
