"""Prompt sources besides a task's splits: OCR-mini's template over seeded random words (runs
without a task), and a prompt file (``Config.prompt_file``)."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

from spotlight.tasks.ocr_mini import TEMPLATE


def word_prompts(num_prompts: int, seed: int, word_len: int = 3) -> list[str]:
    """``num_prompts`` prompts 'a sign that says "XYZ"' with seeded random uppercase words."""
    rng = random.Random(seed)
    return [
        TEMPLATE.format("".join(rng.choice(string.ascii_uppercase) for _ in range(word_len)))
        for _ in range(num_prompts)
    ]


def read_prompt_file(path: str) -> tuple[list[str], list[str]]:
    """The ``train`` and ``val`` prompts of a ``prompt_file`` (``Config.prompt_file``).

    Raises:
        FileNotFoundError: no such file.
        ValueError: not JSON, not two non-empty lists of non-blank strings, or a prompt in
            both.
    """
    if not Path(path).is_file():
        raise FileNotFoundError(f"prompt_file {path}: no such file")
    try:
        doc = json.loads(Path(path).read_text())
    except ValueError as e:  # not JSON, or not text
        raise ValueError(f"prompt_file {path}: not a JSON file ({e})") from None
    splits = [doc.get(k) if isinstance(doc, dict) else None for k in ("train", "val")]
    for name, prompts in zip(("train", "val"), splits, strict=True):
        if (
            not prompts
            or not isinstance(prompts, list)
            or not all(isinstance(x, str) and x.strip() for x in prompts)
        ):
            raise ValueError(
                f"prompt_file {path}: {name!r} must be a non-empty list of non-blank prompts"
            )
    both = sorted(set(splits[0]) & set(splits[1]))
    if both:
        raise ValueError(f"prompt_file {path}: {len(both)} prompt(s) in train and val: {both[0]!r}")
    return list(splits[0]), list(splits[1])
