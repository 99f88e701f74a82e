"""Prompt source for runs without a task: OCR-mini's template over seeded random words."""

from __future__ import annotations

import random
import string

from spotlight.tasks.ocr_mini import TEMPLATE


def word_prompts(num_prompts: int, seed: int, word_len: int = 3) -> list[str]:
    """``num_prompts`` prompts 'a sign that says "XYZ"' with seeded random uppercase words."""
    rng = random.Random(seed)
    return [
        TEMPLATE.format("".join(rng.choice(string.ascii_uppercase) for _ in range(word_len)))
        for _ in range(num_prompts)
    ]
