"""Image rewards behind one interface: ``reward(images, prompts) -> (N,) float32 in [0, 1]``.

``images`` is uint8 ``(N, H, W, C)``; each reward checks its input and names what is wrong.
Rewards are built by name; heavy ones import their dependencies only when built.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from spotlight.rewards.simple import BrightnessReward, check_images

Reward = Callable[[np.ndarray, list[str]], np.ndarray]


def _ocr() -> Reward:
    from spotlight.rewards.ocr import OcrReward

    return OcrReward()


def _geneval() -> Reward:
    from spotlight.rewards.geneval import GenEvalReward

    return GenEvalReward()


def _clip() -> Reward:
    from spotlight.rewards.hub import ClipScoreReward

    return ClipScoreReward()


REWARDS: dict[str, Callable[[], Reward]] = {
    "brightness": BrightnessReward,
    "ocr": _ocr,
    "geneval": _geneval,
    "clip": _clip,
}
"""Name -> factory. ``ocr``: Tesseract (OCR-mini); ``geneval``: the rule-based GenEval-mini
detector; ``clip``: a CLIP score from a local model folder (real clusters);
``brightness``: a trivial reward for smoke tests."""


def build_reward(name: str) -> Reward:
    """Construct a reward by name."""
    try:
        factory = REWARDS[name]
    except KeyError:
        raise ValueError(f"unknown reward {name!r}; known: {', '.join(sorted(REWARDS))}") from None
    return factory()


def preflight_reward(name: str) -> None:
    """Fail now, with the reward's own clear message, if ``name`` cannot be built where the
    job's replicas will build it (unknown name, no tesseract, no local CLIP folder). Cheap:
    the CLIP check looks at the folder instead of loading the model."""
    if name == "clip":
        import os

        from spotlight.rewards.hub import DEFAULT_CLIP_PATH, find_clip_folder

        find_clip_folder(os.environ.get("SPOTLIGHT_CLIP_MODEL", DEFAULT_CLIP_PATH))
        return
    build_reward(name)


__all__ = [
    "REWARDS",
    "BrightnessReward",
    "Reward",
    "build_reward",
    "check_images",
    "preflight_reward",
]
