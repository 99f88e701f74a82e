"""How the OCR tasks compare text: the one normal form of a word, used where scenes are made
distinct (:mod:`.ocr_scenes`) and where a reading is scored (``spotlight.rewards.ocr``)."""

from __future__ import annotations


def normalize(text: str) -> str:
    """``text`` lowercased with all whitespace removed: the form both sides are compared in."""
    return "".join(text.split()).lower()
