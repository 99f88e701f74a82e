"""Tasks: prompt sets, ground-truth renderers and the reward that scores each."""

from __future__ import annotations

from pathlib import Path

from spotlight.tasks.base import Task

ASSETS = Path(__file__).resolve().parent.parent / "assets"

TASK_NAMES = ("ocr-mini", "geneval-mini")


def get_task(name: str) -> Task:
    """The task called ``name``."""
    if name == "ocr-mini":
        from spotlight.tasks.ocr_mini import OcrMini

        return OcrMini()
    if name == "geneval-mini":
        from spotlight.tasks.geneval_mini import GenEvalMini

        return GenEvalMini()
    raise ValueError(f"unknown task {name!r}; known: {', '.join(TASK_NAMES)}")


def base_checkpoint(name: str) -> str:
    """Path of the tiny base model shipped for task ``name`` (docs/tasks.md: how it was made)."""
    get_task(name)
    return str(ASSETS / f"{name}.safetensors")


__all__ = ["TASK_NAMES", "Task", "base_checkpoint", "get_task"]
