"""OCR-mini: render a short uppercase word on a sign; scored by Tesseract (the OCR reward).

Prompts are ``a sign that says "XYZ"`` over random 3-letter words; images are 32x64 grayscale,
dark text on a light background. Validation words never appear in training or pretraining.

Version 2 (the renders, not the prompts or the reward): half of the ground-truth renders use a
small font (9-11 px instead of 17-22), so a model pretrained on them draws the same prompt
sometimes large and sometimes small, as a real text-to-image model draws many styles. Tesseract
reads small clean renders (0.90-0.96) but not the tiny model's small letters, so the OCR reward
prefers the large ones: a direction shared by every prompt, decided early in sampling
(docs/tasks.md, "OCR-mini v2"). Version 1 used the large font only.
"""

from __future__ import annotations

import functools
import string

import numpy as np
from PIL import Image, ImageDraw, ImageFont

TEMPLATE = 'a sign that says "{}"'
WORD_LEN = 3
NUM_TRAIN = 2000
NUM_VAL = 256
SPLIT_SEED = 20261130
"""Fixes the splits: changing it changes every prompt set (bump the task version then)."""
FONT_SIZES = (17, 18, 19, 20, 21, 22)
"""Pixel sizes of Pillow's bundled scalable font used for ground-truth renders."""
BACKGROUND = (215, 255)
"""Range of the background gray level; text is drawn 0-60."""
VERSION = 2
"""Version of the renders (the pretraining data); the shipped base model was trained on it."""
SMALL_PROB = 0.5
"""Share of the renders in the small font (version 2)."""
SMALL_FONT_SIZES = (9, 10, 11)
"""Pixel sizes of the small font."""


def _all_words() -> list[str]:
    letters = string.ascii_uppercase
    return [a + b + c for a in letters for b in letters for c in letters]


@functools.lru_cache(maxsize=1)
def _splits() -> tuple[tuple[str, ...], tuple[str, ...], frozenset[str]]:
    words = _all_words()
    order = np.random.default_rng(SPLIT_SEED).permutation(len(words))
    val = tuple(words[i] for i in order[:NUM_VAL])
    train = tuple(words[i] for i in order[NUM_VAL : NUM_VAL + NUM_TRAIN])
    return val, train, frozenset(val)


@functools.lru_cache(maxsize=len(FONT_SIZES) + len(SMALL_FONT_SIZES))
def _font(size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=size)


class OcrMini:
    """The OCR-mini task (see the module docstring)."""

    name = "ocr-mini"
    height = 32
    width = 64
    channels = 1
    reward = "ocr"

    def prompts(self, split: str) -> list[str]:
        val, train, _ = _splits()
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        return [TEMPLATE.format(w) for w in (train if split == "train" else val)]

    def sample_prompt(self, rng: np.random.Generator) -> str:
        """Any 3-letter word except the validation words (17,320 of 17,576)."""
        _, _, val = _splits()
        letters = string.ascii_uppercase
        while True:
            word = "".join(letters[i] for i in rng.integers(0, 26, WORD_LEN))
            if word not in val:
                return TEMPLATE.format(word)

    def render(self, prompt: str, rng: np.random.Generator) -> np.ndarray:
        """The quoted word in a random size, position and contrast (the small font with
        probability ``SMALL_PROB``): uint8 (32, 64, 1)."""
        word = target_text(prompt)
        sizes = SMALL_FONT_SIZES if rng.random() < SMALL_PROB else FONT_SIZES
        font = _font(int(rng.choice(sizes)))
        bg = int(rng.integers(*BACKGROUND))
        fg = int(rng.integers(0, 61))
        img = Image.new("L", (self.width, self.height), bg)
        draw = ImageDraw.Draw(img)
        left, top, right, bottom = draw.textbbox((0, 0), word, font=font)
        slack_x = max(0, self.width - (right - left) - 2)
        slack_y = max(0, self.height - (bottom - top) - 2)
        x = 1 + int(rng.integers(0, slack_x + 1)) - left
        y = 1 + int(rng.integers(0, slack_y + 1)) - top
        draw.text((x, y), word, fill=fg, font=font)
        return np.asarray(img, dtype=np.uint8)[:, :, None]


def target_text(prompt: str) -> str:
    """The text between the first pair of double quotes; ValueError when there is none."""
    parts = prompt.split('"')
    if len(parts) < 3 or not parts[1].strip():
        raise ValueError(f'OCR prompt has no quoted target text (like "ABC"): {prompt!r}')
    return parts[1]
