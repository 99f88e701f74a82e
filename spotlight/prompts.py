"""Prompt sources. Until the task prompt sets land, OCR-style prompts over random words."""

from __future__ import annotations

import random
import string


def word_prompts(num_prompts: int, seed: int, word_len: int = 3) -> list[str]:
    """``num_prompts`` prompts 'a sign that says "XYZ"' with seeded random uppercase words."""
    rng = random.Random(seed)
    return [
        'a sign that says "'
        + "".join(rng.choice(string.ascii_uppercase) for _ in range(word_len))
        + '"'
        for _ in range(num_prompts)
    ]
