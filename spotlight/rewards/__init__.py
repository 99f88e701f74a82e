"""Image rewards behind one interface: ``reward(images, prompts) -> (N,) float32 in [0, 1]``.

``images`` is uint8 ``(N, H, W, C)``; each reward checks its input and names what is wrong.
Rewards are built by name; heavy ones import their dependencies only when built. The rewards
that load a model read it from a local folder (``Config.reward_model``, else the reward's
default); nothing is downloaded.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from spotlight.rewards.simple import BrightnessReward, check_images

Reward = Callable[[np.ndarray, list[str]], np.ndarray]


def _brightness(model: str | None = None) -> Reward:
    return BrightnessReward()


def _ocr(model: str | None = None) -> Reward:
    from spotlight.rewards.ocr import OcrReward

    return OcrReward()


def _ocr_exact(model: str | None = None) -> Reward:
    from spotlight.rewards.ocr import OcrReward

    return OcrReward(threshold=1.0)


def _ocr_1of3(model: str | None = None) -> Reward:
    from spotlight.rewards.ocr import OcrReward

    return OcrReward(threshold=1 / 3)


def _ocr_2of3(model: str | None = None) -> Reward:
    from spotlight.rewards.ocr import OcrReward

    return OcrReward(threshold=2 / 3)


def _geneval(model: str | None = None) -> Reward:
    from spotlight.rewards.geneval import GenEvalReward

    return GenEvalReward()


def _geneval_exact(model: str | None = None) -> Reward:
    from spotlight.rewards.geneval import GenEvalReward

    return GenEvalReward(exact=True)


def _clip(model: str | None = None) -> Reward:
    from spotlight.rewards.hub import ClipScoreReward

    return ClipScoreReward(model)


def _ocr_model(model: str | None = None) -> Reward:
    from spotlight.rewards.ocr_model import OcrModelReward

    return OcrModelReward(model)


def _geneval_model(model: str | None = None) -> Reward:
    from spotlight.rewards.geneval_model import GenEvalModelReward

    return GenEvalModelReward(model)


REWARDS: dict[str, Callable[..., Reward]] = {
    "brightness": _brightness,
    "ocr": _ocr,
    "ocr-exact": _ocr_exact,
    "ocr-2of3": _ocr_2of3,
    "ocr-1of3": _ocr_1of3,
    "geneval": _geneval,
    "geneval-exact": _geneval_exact,
    "clip": _clip,
    "ocr-model": _ocr_model,
    "geneval-model": _geneval_model,
}
"""Name -> factory ``(model folder or None) -> reward``. ``ocr``: Tesseract (OCR-mini);
``ocr-exact`` / ``ocr-2of3`` / ``ocr-1of3``: the same read, binary (1 when the word is read
exactly / with at most one letter wrong / with at least one letter right; the saturating rewards
of Flow-GRPO's GenEval style, ``ocr-1of3`` the most lenient);
``geneval``: the rule-based GenEval-mini detector, the fraction of a prompt's clauses that
hold; ``geneval-exact``: the same, binary (1 when every clause holds: GenEval's own score);
``ocr-model``: GOT-OCR 2.0 on real images
(spotlight.rewards.ocr_model); ``geneval-model``: GenEval's rules on Mask2Former detections and
CLIP colours (spotlight.rewards.geneval_model); ``clip``: a CLIP score (real clusters);
``brightness``: a trivial reward for smoke tests."""

MODEL_REWARDS = ("clip", "ocr-model", "geneval-model")
"""The rewards that load a model from a local folder (``Config.reward_model``): on a GPU
cluster the reward deployment gets a GPU of its own for them."""


def build_reward(name: str, model: str | None = None) -> Reward:
    """Construct a reward by name; ``model``: the local model folder of a model reward."""
    try:
        factory = REWARDS[name]
    except KeyError:
        raise ValueError(f"unknown reward {name!r}; known: {', '.join(sorted(REWARDS))}") from None
    return factory(model)


def preflight_reward(name: str, model: str | None = None) -> None:
    """Fail now, with the reward's own clear message, if ``name`` cannot be built where the
    job's replicas will build it (unknown name, no tesseract, a missing model folder). Cheap:
    the model rewards look at their folders instead of loading the models."""
    if name == "clip":
        import os

        from spotlight.rewards.hub import DEFAULT_CLIP_PATH, find_clip_folder

        find_clip_folder(model or os.environ.get("SPOTLIGHT_CLIP_MODEL", DEFAULT_CLIP_PATH))
        return
    if name == "ocr-model":
        from spotlight.rewards.ocr_model import preflight_ocr_model

        preflight_ocr_model(model)
        return
    if name == "geneval-model":
        from spotlight.rewards.geneval_model import preflight_geneval_models

        preflight_geneval_models(model)
        return
    build_reward(name, model)


__all__ = [
    "MODEL_REWARDS",
    "REWARDS",
    "BrightnessReward",
    "Reward",
    "build_reward",
    "check_images",
    "preflight_reward",
]
