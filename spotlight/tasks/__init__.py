"""Tasks: prompt sets, ground-truth renderers and the reward that scores each."""

from __future__ import annotations

from pathlib import Path

from spotlight.tasks.base import Task

ASSETS = Path(__file__).resolve().parent.parent / "assets"

TASK_NAMES = ("ocr-mini", "geneval-mini")
"""The laptop-scale tasks: a renderer, a shipped tiny base model, a CPU reward."""
PROMPT_SET_NAMES = ("ocr", "geneval")
"""The paper's tasks for pretrained models (Qwen-Image): prompt sets with deterministic splits,
scored by model rewards (``ocr-model``, ``geneval-model``); no renderer, no shipped base."""


def get_task(name: str) -> Task:
    """The task called ``name`` (one of ``TASK_NAMES`` or ``PROMPT_SET_NAMES``)."""
    if name == "ocr-mini":
        from spotlight.tasks.ocr_mini import OcrMini

        return OcrMini()
    if name == "geneval-mini":
        from spotlight.tasks.geneval_mini import GenEvalMini

        return GenEvalMini()
    if name == "ocr":
        from spotlight.tasks.ocr_scenes import OcrScenes

        return OcrScenes()
    if name == "geneval":
        from spotlight.tasks.geneval import GenEvalTask

        return GenEvalTask()
    known = ", ".join((*TASK_NAMES, *PROMPT_SET_NAMES))
    raise ValueError(f"unknown task {name!r}; known: {known}")


def base_checkpoint(name: str) -> str:
    """Path of the tiny base model shipped for task ``name`` (docs/tasks.md: how it was made).

    Raises:
        ValueError: an unknown task, or a prompt set (pretrained models bring their weights).
    """
    if name in PROMPT_SET_NAMES:
        raise ValueError(
            f"task {name!r} is a prompt set for pretrained models: no base model ships with it"
            " (pass the model folder with --checkpoint)"
        )
    get_task(name)
    return str(ASSETS / f"{name}.safetensors")


__all__ = [
    "PROMPT_SET_NAMES",
    "TASK_NAMES",
    "Task",
    "base_checkpoint",
    "get_task",
]
